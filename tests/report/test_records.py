"""The runs a report reads (``arena.report.records``): the study as it is now, and a store without finished runs."""


from arena.cli import main
from arena.report.comparison import write_study_report
from arena.report.records import finished_runs
from arena.study import load_study
from arena.tracking import Tracker
from report_support import log_run, study_file
from report_support import report_store  # noqa: F401 (the fixture store)


def test_the_runs_read_are_those_of_the_study_as_it_is_now(store):
    """Per (arm, seed), newest first: a run with the config hash wins; else a run whose params agree with the
    study and lack only options the study leaves at their defaults (logged before the option existed); a run
    at another setting (stale) or an unfinished run never counts."""
    folder, uri, _, _ = store
    study = load_study(study_file(folder, "older", [0]))
    tracker = Tracker(uri, "older")
    parent = tracker.start_parent("older test", {"arena.study": "older"})
    grpo, es = (next(r for r in study.runs() if r.arm == arm) for arm in ("grpo", "es"))
    unset = next(key for key in es.resolved()["options"] if key not in es.options)  # left at its default
    def without(run, option):
        resolved = run.resolved()
        return {**resolved, "options": {k: v for k, v in resolved["options"].items() if k != option}}
    def other_hash(run):
        return {"arena.study": "older", "arena.arm": run.arm, "arena.seed": "0", "arena.config_hash": "0123456789ab"}
    exact = log_run(tracker, grpo, parent)
    log_run(tracker, grpo, parent, other_hash(grpo), without(grpo, "lr"))  # newer, agrees but lacks a set option
    predating = log_run(tracker, es, parent, other_hash(es), without(es, unset))
    changed = es.resolved()
    changed["options"] = {**changed["options"], "population": 8}
    log_run(tracker, es, parent, other_hash(es), changed)  # newer, at another population: stale
    log_run(tracker, es, parent, status="FAILED")  # newest, with the hash, unfinished
    found = finished_runs(tracker, study.runs())
    assert found.runs[("grpo", 0)].run_id == exact and found.runs[("es", 0)].run_id == predating
    assert found.predating == {("es", 0): [f"options.{unset}"]} and found.stale == 2
    report = write_study_report(study, tracker, folder / "older-report", log=False)
    summary = (folder / "older-report" / "summary.md").read_text()
    assert f"matched by parameters, not by config hash (logged before the code had `options.{unset}`" in summary
    assert "left out: 2 finished runs" in summary and "missing (no finished run at the study's configuration): " \
        "block_grpo seed 0" in summary
    assert [row.arm for row in report.rows] == ["grpo", "es"]


def test_a_study_without_finished_runs_is_one_line_exit_2(tmp_path, capsys):
    path = study_file(tmp_path, "empty", [0])
    code = main(["report", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'missing.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and "no tracking store at" in err and "Traceback" not in err
    assert not (tmp_path / "missing.db").exists()
    Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "empty")
    code = main(["report", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and "no finished run of study 'empty'" in err and "arena run" in err and "Traceback" not in err
