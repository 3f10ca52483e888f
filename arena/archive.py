"""Run archives: a study's finished runs as files that travel without their MLflow store (``arena export``,
``arena import``).

Why: a study of many hours outlives the machine it started on (a session, a CI job, a preempted node), and an
MLflow store is one SQLite file and an artifact tree that the next machine does not have. ``arena export``
writes each finished run that ``arena report`` would read (``arena.report.records``: the (arm, seed) runs at the
study's current configuration, and its controls) as one file, ``<folder>/<experiment>/<run id>.tar.gz``:

- ``run.json``: the format, the experiment, and the run's name, status, start and end times, tags, params and
  every metric's whole history (step, timestamp, value);
- ``artifacts/``: every artifact, its folder tree kept (per-prompt rewards, completions, ``study.yaml``).

``arena import`` recreates each run in another store (``Tracker.restore_run``): same tags, params, metrics
and timestamps, same artifacts, under one parent run per experiment and invocation (tag ``arena.kind =
invocation``, named for the folder), tagged ``arena.archived_id`` with the run's first id. So ``arena run``
skips the imported runs (finished, same config hash) and runs only the rest, and ``arena report`` reads them
like any other. Both are idempotent: an archived run is never written twice (its file name is its first id,
kept through any number of imports and exports), an imported run never imported twice, and a run half
imported (interrupted) is left FAILED, which neither the runner nor the report takes for finished.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from arena.progress import Progress
from arena.tracking import safe_name

FORMAT = 1
ARCHIVED_ID = "arena.archived_id"  # the run's id in the store it first ran in
RECORD = "run.json"
ARTIFACTS = "artifacts"
KEYS = ("run_id", "run_name", "status", "start_time", "end_time", "tags", "params", "metrics")


class ArchiveError(Exception):
    """A file that is not a run archive, or a folder without any."""


@dataclass
class Counts:
    written: int = 0  # exported or imported now
    present: int = 0  # already in the folder (export) or the store (import)


def archived_id(record: dict) -> str:
    return record["tags"].get(ARCHIVED_ID, record["run_id"])


def archive_path(folder: Path, experiment: str, run_id: str) -> Path:
    return Path(folder) / safe_name(experiment) / f"{run_id}.tar.gz"


def study_run_ids(tracker, study) -> list[str]:
    """The runs ``arena report`` reads for ``study``: each (arm, seed)'s finished run, then each finished control."""
    from arena.report.records import finished_control, finished_runs

    ids = [record.run_id for record in finished_runs(tracker, study.runs()).runs.values()]
    controls = (finished_control(tracker, spec) for spec in study.control_specs())
    return ids + [record.run_id for record in controls if record is not None]


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))  # mtime 0, no owner: the same run gives the same bytes


def write_archive(path: Path, record: dict, experiment: str, artifacts: Path) -> None:
    """``record`` and the folder ``artifacts`` as one .tar.gz at ``path``, written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(staging, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w") as archive:
        _add(archive, RECORD, json.dumps({"format": FORMAT, "experiment": experiment, **record}, indent=1).encode())
        for file in sorted(p for p in artifacts.rglob("*") if p.is_file()):
            _add(archive, f"{ARTIFACTS}/{file.relative_to(artifacts).as_posix()}", file.read_bytes())
    os.replace(staging, path)


def read_record(path: Path) -> tuple[dict, tarfile.TarFile]:
    """The run.json of the archive at ``path`` (checked) and the open archive; ``ArchiveError`` names the file."""
    try:
        archive = tarfile.open(path, mode="r:gz")
        member = archive.extractfile(RECORD)
        record = json.loads(member.read()) if member else None
    except (OSError, KeyError, tarfile.TarError, ValueError) as error:
        raise ArchiveError(f"{path}: not a run archive ({type(error).__name__}: {error})") from None
    missing = [key for key in ("format", "experiment", *KEYS) if not isinstance(record, dict) or key not in record]
    if missing:
        raise ArchiveError(f"{path}: not a run archive ({RECORD} lacks {', '.join(missing)})")
    if record["format"] != FORMAT:
        raise ArchiveError(f"{path}: archive format {record['format']!r}; this arena reads format {FORMAT}")
    return record, archive


def export_study(tracker, study, folder: Path, progress: bool = True) -> Counts:
    """Write each of ``study``'s finished runs (``study_run_ids``) that ``folder`` lacks."""
    ids = study_run_ids(tracker, study)
    if not ids:
        raise ArchiveError(f"no finished run of study {study.name!r} at its current configuration in {tracker.uri}: "
                           "nothing to export")
    counts = Counts()
    bar = Progress(f"export {study.name}", len(ids), "runs", enabled=progress)
    for run_id in ids:
        record = tracker.run_record(run_id)
        path = archive_path(folder, tracker.experiment, archived_id(record))
        if path.exists():  # a finished run does not change: the file written before holds it
            counts.present += 1
        else:
            with tempfile.TemporaryDirectory() as scratch:
                write_archive(path, record, tracker.experiment, tracker.download_all(run_id, scratch))
            counts.written += 1
        bar.update(counts.written + counts.present)
    bar.close(f"{counts.written} written, {counts.present} already in {folder}")
    return counts


def archives_in(source: Path) -> list[Path]:
    paths = [source] if source.is_file() else sorted(source.rglob("*.tar.gz"))
    if not paths:
        raise ArchiveError(f"{source}: no run archives (*.tar.gz) " + ("there" if source.exists() else "(no such folder)"))
    return paths


def import_archives(source: Path, uri: str, progress: bool = True) -> Counts:
    """Restore every archive under ``source`` (a folder, or one archive) that the store at ``uri`` lacks."""
    from arena.tracking import Tracker

    paths = archives_in(Path(source))
    trackers, parents, counts = {}, {}, Counts()
    bar = Progress(f"import {source}", len(paths), "runs", enabled=progress)
    try:
        for path in paths:
            record, archive = read_record(path)
            with archive:
                experiment, first_id = record["experiment"], archived_id(record)
                if experiment not in trackers:
                    trackers[experiment] = Tracker(uri, experiment)
                tracker = trackers[experiment]
                if tracker.has_run(record["run_id"]) or any(
                        r.status == "FINISHED" for r in tracker.find_runs({ARCHIVED_ID: first_id})):
                    counts.present += 1
                else:
                    if experiment not in parents:
                        parents[experiment] = tracker.start_parent(
                            f"import {source}", {"arena.study": record["tags"].get("arena.study", experiment),
                                                 "arena.archive": str(source)})
                    record["tags"] = {**record["tags"], ARCHIVED_ID: first_id}
                    with tempfile.TemporaryDirectory() as scratch:
                        try:
                            archive.extractall(scratch, filter="data")  # no member outside scratch
                        except (OSError, tarfile.TarError) as error:
                            raise ArchiveError(f"{path}: unreadable ({type(error).__name__}: {error})") from None
                        artifacts = Path(scratch) / ARTIFACTS
                        tracker.restore_run(record, artifacts if artifacts.is_dir() else None, parents[experiment])
                    counts.written += 1
            bar.update(counts.written + counts.present)
    except BaseException:
        for experiment, parent in parents.items():
            trackers[experiment].finish(parent, "KILLED")
        raise
    for experiment, parent in parents.items():
        trackers[experiment].finish(parent)
    bar.close(f"{counts.written} imported, {counts.present} already in the store")
    return counts
