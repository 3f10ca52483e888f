"""`arena export` and `arena import`: a study's runs carried to a fresh store by files alone. The oracle is the
store they came from, holding runs that `arena run` made on the tiny model: the report reads the same arrays
from both stores, every record and artifact is the same but for the ids, `arena run` on the new store runs
nothing, exporting or importing again writes nothing, and an import cut short is never taken for finished."""
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from arena.archive import ARCHIVED_ID, archived_id, import_archives, read_record
from arena.cli import main
from arena.report.records import read_results
from arena.study import load_study
from arena.tracking import Tracker
from conftest import STUDY, children, write

STUDY_WITH_CONTROL = {**STUDY, "seeds": [0], "controls": ["frozen"]}


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    """The study run once (2 arms x 1 seed and the frozen control) into its own store."""
    folder = tmp_path_factory.mktemp("origin")
    path = write(folder, STUDY_WITH_CONTROL)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    assert main(["run", str(path), "--jobs", "1", "--tracking-uri", uri, "--workdir", str(folder / ".arena")]) == 0
    return path, uri


def export(path, uri, to) -> int:
    return main(["export", str(path), "--tracking-uri", uri, "--to", str(to)])


def records_by_first_id(uri: str) -> dict[str, dict]:
    tracker = Tracker(uri, "e2e")
    runs, _ = children(MlflowClient(uri), "e2e")
    out = {}
    for run in runs:
        record = tracker.run_record(run.info.run_id)
        out[archived_id(record)] = record
    return out


def artifact_bytes(uri: str, run_id: str, folder) -> dict[str, bytes]:
    local = Tracker(uri, "e2e").download_all(run_id, folder / run_id)
    return {p.relative_to(local).as_posix(): p.read_bytes() for p in sorted(local.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_an_imported_study_reads_back_as_the_original_and_runs_nothing(origin, tmp_path, capsys):
    path, uri = origin
    archive = tmp_path / "archive"
    assert export(path, uri, archive) == 0
    assert len(sorted((archive / "e2e").glob("*.tar.gz"))) == 3  # block_grpo, es, frozen
    new_uri = f"sqlite:///{tmp_path / 'new.db'}"
    assert main(["import", str(archive), "--tracking-uri", new_uri]) == 0
    assert "3 runs imported" in capsys.readouterr().out

    # every record the same but the ids: tags (the parent aside), params, times, each metric's every point
    before, after = records_by_first_id(uri), records_by_first_id(new_uri)
    assert sorted(before) == sorted(after)
    for first_id, record in before.items():
        moved = after[first_id]
        assert moved["run_id"] != first_id and moved["tags"][ARCHIVED_ID] == first_id
        strip = ("mlflow.parentRunId", ARCHIVED_ID)
        assert ({k: v for k, v in moved["tags"].items() if k not in strip}
                == {k: v for k, v in record["tags"].items() if k not in strip})
        for key in ("run_name", "status", "start_time", "end_time", "params", "metrics"):
            assert moved[key] == record[key], key
        assert artifact_bytes(new_uri, moved["run_id"], tmp_path / "b") == artifact_bytes(uri, first_id, tmp_path / "a")

    # the report's reading of both stores: the same curves and per-prompt rewards, the control included
    study = load_study(path)
    old, new = (read_results(Tracker(u, "e2e"), study) for u in (uri, new_uri))
    assert list(old.arms) == list(new.arms) == ["block_grpo", "es"] and not new.missing
    pairs = [(a, b) for arm in old.arms for a, b in zip(old.arms[arm], new.arms[arm])]
    pairs.append((old.controls["frozen"], new.controls["frozen"]))
    for a, b in pairs:
        assert a.curves.keys() == b.curves.keys()
        for key in a.curves:
            np.testing.assert_array_equal(a.curves[key], b.curves[key])
        np.testing.assert_array_equal(a.start_rewards, b.start_rewards)
        np.testing.assert_array_equal(a.end_rewards, b.end_rewards)

    # arena run on the imported store finds every run finished: nothing runs, no child run is added
    workdir = tmp_path / "fresh-workdir"
    assert main(["run", str(path), "--jobs", "1", "--tracking-uri", new_uri, "--workdir", str(workdir)]) == 0
    assert "0 runs finished, 3 already finished (skipped)" in capsys.readouterr().out
    assert len(children(MlflowClient(new_uri), "e2e")[0]) == 3

    # again: the imported runs keep their first ids, so nothing is written twice either way
    assert export(path, new_uri, archive) == 0
    assert "0 runs written" in capsys.readouterr().out and len(list(archive.rglob("*.tar.gz"))) == 3
    assert main(["import", str(archive), "--tracking-uri", new_uri]) == 0
    assert "0 runs imported" in capsys.readouterr().out
    assert main(["import", str(archive), "--tracking-uri", uri]) == 0  # into the store they came from
    assert "0 runs imported" in capsys.readouterr().out


def test_an_import_cut_short_is_never_taken_for_finished_and_completes_next_time(origin, tmp_path, monkeypatch):
    path, uri = origin
    archive = tmp_path / "archive"
    assert export(path, uri, archive) == 0
    new_uri = f"sqlite:///{tmp_path / 'new.db'}"
    real = MlflowClient.log_artifacts

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(MlflowClient, "log_artifacts", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        import_archives(archive, new_uri, progress=False)
    runs, parents = children(MlflowClient(new_uri), "e2e")
    assert [r.info.status for r in runs] == ["FAILED"] and [p.info.status for p in parents] == ["KILLED"]
    with pytest.raises(Exception, match="no finished run"):
        read_results(Tracker(new_uri, "e2e"), load_study(path))

    monkeypatch.setattr(MlflowClient, "log_artifacts", real)
    assert import_archives(archive, new_uri, progress=False).written == 3  # the failed one too
    results = read_results(Tracker(new_uri, "e2e"), load_study(path))
    assert not results.missing and "frozen" in results.controls


def test_what_is_not_an_archive_is_a_one_line_error_naming_it(origin, tmp_path, capsys):
    path, uri = origin
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["import", str(empty), "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    assert f"{empty}: no run archives" in capsys.readouterr().err

    broken = empty / "e2e" / "abc.tar.gz"
    broken.parent.mkdir()
    broken.write_bytes(b"not a tarball")
    assert main(["import", str(empty), "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    err = capsys.readouterr().err
    assert f"{broken}: not a run archive" in err and "Traceback" not in err

    with tarfile.open(broken, "w:gz") as tar:  # a tarball, but not arena's
        info = tarfile.TarInfo("run.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    assert main(["import", str(broken), "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    assert "run.json lacks format, experiment, run_id" in capsys.readouterr().err

    other = write(tmp_path, {**STUDY_WITH_CONTROL, "name": "never_run"}, "never_run.yaml")
    assert export(other, uri, tmp_path / "out") == 2
    assert "no finished run of study 'never_run'" in capsys.readouterr().err
    assert export(path, f"sqlite:///{tmp_path / 'none.db'}", tmp_path / "out") == 2
    assert "no tracking store at" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_every_committed_archive_is_a_finished_run_of_a_study_as_it_is_now():
    """archive/ holds the project's long studies (docs/results.md): each file must be what `arena import` then
    `arena report` read for a study in studies/ at its current configuration, so that an edit of a study (or of a
    method's options, which changes the config hash) cannot leave its archived runs silently out of the report."""
    studies = {}  # experiment -> the studies logging to it (a family's view, e.g. *_mu1.yaml, shares its runs)
    for path in sorted((ROOT / "studies").rglob("*.yaml")):
        study = load_study(path)
        studies.setdefault(study.tracking.experiment, []).append(study)
    for path in sorted((ROOT / "archive").rglob("*.tar.gz")):
        record, archive = read_record(path)
        archive.close()
        assert path.parent.name == record["experiment"] and path.name == f"{archived_id(record)}.tar.gz", path
        assert record["status"] == "FINISHED", path
        sharing = studies.get(record["experiment"])
        assert sharing, f"{path}: no study in studies/ logs to experiment {record['experiment']!r}"
        tags = record["tags"]
        if "arena.control" in tags:
            wanted = {(spec.arm, spec.config_hash) for study in sharing for spec in study.control_specs()}
            assert (tags["arena.control"], tags["arena.config_hash"]) in wanted, path
        else:
            wanted = {(run.arm, str(run.seed), run.config_hash) for study in sharing for run in study.runs()}
            assert (tags["arena.arm"], tags["arena.seed"], tags["arena.config_hash"]) in wanted, path
