"""The verdict families across studies (docs/results.md, "One family per question"): every registered
confirmation's comparisons with its reference, grouped by the seed question they answer, with Holm's correction
over each question's whole family (the difference tests and the TOST tests separately, as within a study).

    mkdir /tmp/families && cd /tmp/families && arena import /path/to/arena/archive
    python /path/to/arena/studies/confirm/families.py sqlite:///mlflow.db

Prints one table per question: each comparison's raw p, its p adjusted within its study (the registered verdict)
and within the question's family, and whether the verdict changes. ES across budgets (es_scaling*.yaml) is a test
of another kind (non-inferiority at every budget mark, its own family) and the matched sign checks are judged
within their study (their family: the arms against sharpening); both are left out here.
"""
import dataclasses
import sys
from pathlib import Path

from arena.report import comparison
from arena.report.records import ReportError, read_results
from arena.study import load_study
from arena.tracking import Tracker

QUESTIONS = {  # study -> the question its comparisons answer ("methods": the reference against each method)
    "es_vs_blockgrpo": "methods", "es_vs_blockgrpo_flops": "methods", "es_vs_blockgrpo_wallclock": "methods",
    "multiblock": "methods", "multiblock_flops": "methods", "multiblock_wallclock": "methods",
    "silent_bugs": "the seed's silent bugs", "multiblock_silent_bugs": "the seed's silent bugs",
    "estimators": "in-block estimators", "estimators_forward_tokens": "in-block estimators",
    "multiblock_estimators": "in-block estimators",
}


def read(uri: str, path: Path):
    """The study at ``path`` and its finished runs in the store at ``uri`` (None: none there)."""
    study = load_study(path)
    try:
        return read_results(Tracker(uri, study.tracking.experiment or study.name), study)
    except ReportError as error:
        print(f"{path.stem}: skipped ({error})")
        return None


def comparisons(uri: str, read=read) -> list[dict]:
    rows = []
    for stem, question in QUESTIONS.items():
        results = read(uri, Path(__file__).with_name(f"{stem}.yaml"))
        if results is None:
            continue
        study = results.study
        for arm, found in comparison.comparisons(results).items():
            rows.append(dict(study=stem, arm=arm, reference=study.reference, found=found, analysis=study.analysis,
                             question=f"{study.reference} vs {arm}" if question == "methods" else question))
    return rows


def report(rows: list[dict]) -> None:
    for question in dict.fromkeys(row["question"] for row in rows):
        family = [row for row in rows if row["question"] == question]
        analyses = {(row["analysis"].margin, row["analysis"].level) for row in family}
        assert len(analyses) == 1, f"{question}: its studies registered different margins or levels {analyses}"
        # one family: comparison.judge, the study's own rule, over every study's differences for this question
        judged = comparison.judge({i: row["found"].difference for i, row in enumerate(family)},
                                  dataclasses.replace(family[0]["analysis"], correction="holm"))
        print(f"\n{question}: {len(family)} comparisons, Holm over them")
        for i, row in enumerate(family):
            c, across, d = row["found"], judged[i], row["found"].difference
            print(f"  {row['study']:26s} {row['arm']:22s} {d.value:+.3f} [{d.low:+.3f}, {d.high:+.3f}]  p {c.p:.4f}"
                  f"  study {c.p_adjusted:.4f}  question {across.p_adjusted:.4f}  TOST study {c.tost_adjusted:.4f}"
                  f"  question {across.tost_adjusted:.4f}  {c.verdict}"
                  + ("" if across.verdict == c.verdict else f" -> {across.verdict}"))


def main(uri: str) -> None:
    report(comparisons(uri))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sqlite:///mlflow.db")
