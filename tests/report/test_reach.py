"""``arena report --reach`` and ``--versus`` (``arena.report.reach``): the marks at which an arm reaches another's
gain, comparisons at shared marks, and the same-draw rule."""

import numpy as np
import yaml

from arena.cli import main
from arena.study import load_study
from arena.tracking import Tracker
from report_support import ARMS, POINTS, ALPHA, MARKS, log_study, lower_cvar, study_file, synthetic_rewards
from report_support import report_store  # noqa: F401 (the fixture store)


def test_reach_tests_each_mark_against_the_target_and_stops_at_the_first_that_fails(store, capsys, tmp_path):
    """--reach synthetic.yaml:block_grpo@100: each arm's gain at every mark minus block_grpo's at 100, recomputed
    here from the synthetic rewards; the answer is the smallest mark of the unbroken run of passing marks from the
    largest down (fixed sequence), on the p values the table prints; a target on another draw is refused."""
    folder, uri, studies, _ = store
    path = str(folder / "synthetic.yaml")
    assert main(["report", path, "--tracking-uri", uri, "--reach", f"{path}:block_grpo@100", "--margin", "0.02"]) == 0
    out = capsys.readouterr().out
    start = lower_cvar(synthetic_rewards("grpo", 0, 0).mean(axis=1), ALPHA)
    gain = lambda arm, point: np.mean([lower_cvar(synthetic_rewards(arm, s, point).mean(axis=1), ALPHA) - start  # noqa: E731
                                       for s in studies["synthetic"].seeds])
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in ARMS]
    for arm in ARMS:
        mine = [row for row in rows if row[0] == arm]
        assert [float(row[1]) for row in mine] == MARKS[1:]
        for point, row in enumerate(mine, start=1):
            assert row[5] == f"{gain(arm, point) - gain('block_grpo', 1):+.3f}", (arm, point, row)
        p = [1.0 if row[8] == "n/a" else 0.0005 if row[8] == "<0.001" else float(row[8]) for row in mine]
        passing = [mark for i, mark in enumerate(MARKS[1:]) if all(q < 0.05 for q in p[i:])]
        answer = next(line for line in out.splitlines() if line.startswith(f"{arm}:"))
        assert (f"reaches it from {passing[0]:g} samples" in answer) if passing else ("does not reach" in answer), \
            (arm, p, answer)
    assert "grpo: does not reach it within 300 samples" in out  # its drift is 0: never as far as block_grpo at 1x

    moved = study_file(tmp_path, "moved", [0, 1])
    raw = yaml.safe_load(moved.read_text())
    moved.write_text(yaml.safe_dump({**raw, "evaluation": {**raw["evaluation"], "seed": 3}}))  # other prompts
    log_study(Tracker(uri, "moved"), load_study(moved))
    assert main(["report", path, "--tracking-uri", uri, "--reach", f"{moved}:block_grpo@100",
                 "--margin", "0.02"]) == 2
    assert "evaluate on different draws" in capsys.readouterr().err


def test_versus_compares_every_arm_with_another_studys_arm_at_the_end_and_at_shared_marks(store, capsys):
    """--versus synthetic.yaml:block_grpo (the study against its own arm, so every mark is shared): at the end and
    at each mark, each arm's mean tail gain minus block_grpo's, recomputed here from the synthetic rewards; a study
    on another draw is refused (exit 2)."""
    folder, uri, studies, _ = store
    path = str(folder / "synthetic.yaml")
    assert main(["report", path, "--tracking-uri", uri, "--versus", f"{path}:block_grpo"]) == 0
    out = capsys.readouterr().out
    start = lower_cvar(synthetic_rewards("grpo", 0, 0).mean(axis=1), ALPHA)
    gain = lambda arm, point: np.mean([lower_cvar(synthetic_rewards(arm, s, point).mean(axis=1), ALPHA) - start  # noqa: E731
                                       for s in studies["synthetic"].seeds])
    end, marks = out.split("on draw 0 at the marks")
    for arm in ARMS:
        final = next(line for line in end.splitlines() if line.startswith(f"{arm} "))
        assert final.split()[1] == f"{gain(arm, POINTS - 1) - gain('block_grpo', POINTS - 1):+.3f}"
        curve = next(line for line in marks.splitlines() if line.startswith(f"{arm} "))
        for point, mark in enumerate(MARKS[1:], start=1):
            assert f"at {mark} samples: {gain(arm, point) - gain('block_grpo', point):+.3f}" in curve
    assert "holm over each arm's 3 marks" in marks and "100 against block_grpo's 104" in marks
    moved = study_file(folder, "moved_versus", [0, 1])
    raw = yaml.safe_load(moved.read_text())
    moved.write_text(yaml.safe_dump({**raw, "evaluation": {**raw["evaluation"], "seed": 3}}))  # other prompts
    log_study(Tracker(uri, "moved_versus"), load_study(moved))
    assert main(["report", path, "--tracking-uri", uri, "--versus", f"{moved}:block_grpo"]) == 2
    assert "evaluate on different draws" in capsys.readouterr().err


def test_shared_marks_pair_the_marks_both_studies_reached_at_equal_use():
    from arena.report.reach import shared_marks

    flops = [0.0, 3.7e12, 7.4e12, 1.1e13, 1.48e13]  # a curve study's marks in token-FLOPs
    target = [0.0, 7.4e12 * 1.01, 1.48e13]  # an arm that ran in samples, its mean FLOPs at its marks
    assert shared_marks(flops, target) == [(2, 1), (4, 2)]
    assert shared_marks(flops, [0.0, 8.0e12]) == []  # 8% past 7.4e12: not the same budget


def test_the_es_scaling_pair_decodes_one_draw_so_reach_compares_them():
    """studies/es_scaling.yaml and es_scaling_grpo.yaml differ in points and budget, not in the draw: --reach takes
    them; another evaluation seed is another draw."""
    import dataclasses
    from pathlib import Path

    from arena.report.reach import same_draw

    root = Path(__file__).resolve().parents[2]
    es, grpo = (load_study(root / "studies" / f"{name}.yaml") for name in ("es_scaling", "es_scaling_grpo"))
    assert es.evaluation.points != grpo.evaluation.points and same_draw(es, grpo)
    moved = dataclasses.replace(grpo, evaluation=dataclasses.replace(grpo.evaluation, seed=grpo.evaluation.seed + 1))
    assert not same_draw(es, moved)
