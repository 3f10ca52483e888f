"""Everything arena writes to (and reads back from) MLflow; the only module of the project that imports mlflow.

Where things land (the user's view: docs/tracking.md):

- an **experiment** per study (created on first use; two processes creating it at once both succeed);
- a **parent run** per invocation of ``arena run`` or ``arena tune`` (tag ``arena.kind = invocation``; ``parent_run``);
- a **child run** per (arm, seed), linked by the system tag ``mlflow.parentRunId``, with the ``arena.*`` tags
  the runner passes (study, arm, seed, method, estimator, config_hash, git_commit, profile) and the arm's
  resolved configuration as params flattened with dots (``options.lr``), values cut to 500 characters;
- **metrics** at every evaluation point and training step, with ``step`` = budget consumed so far, so that
  the curves of all arms align; ``log_missing`` makes resuming idempotent;
- **artifacts** per run: ``study.yaml``, ``evaluations/<step>/completions.json`` and per-prompt rewards;
- the experiment's **first view** in the MLflow UI (``set_first_view``, ``ui_url``): the experiment is marked as
  model training (not GenAI), its description holds the study's question and summary, and a shared view names
  the charts a user sees first, the child runs grouped by arm.

The store is ``sqlite:///mlflow.db`` in the working directory by default, or any tracking URI. Every
client call goes through ``_retry``, so that runs logged from parallel processes to one SQLite file never
fail on "database is locked"; a brand-new SQLite file is created and migrated under a directory lock.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URI = "sqlite:///mlflow.db"  # in the working directory
PARAM_VALUE_LIMIT = 500  # MLflow 3.x accepts 6000, older servers 500: stay portable
TRUNCATED = "...[truncated]"
# What a store (not the front end) can set to choose what MLflow 3.x's UI shows first, read in its front end:
NOTE = "mlflow.note.content"  # the experiment's description (Markdown), shown above its runs
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # opens the runs, not the GenAI overview
SHARED_VIEW = "mlflow.sharedViewState."  # + key: a JSON UI state that the URL's ?viewStateShareKey=key loads
VIEW_KEY = "arena"
EXPERIMENT_TAG_LIMIT = 5000  # MLflow 3.x accepts 20000 characters per experiment tag, older servers 5000
RETRY_SECONDS = 60.0
_LOCKED = ("database is locked", "database table is locked")
# what opening a SQLite file can meet while a process outside arena (without _init_lock) migrates it
_RACY_INIT = _LOCKED + ("already exists", "duplicate column", "unique constraint failed", "no such table",
                        "no such column", "out-of-date database schema")


def resolve_uri(explicit: str | None = None, study_uri: str | None = None) -> str:
    """--tracking-uri > MLFLOW_TRACKING_URI > the study's tracking.uri > sqlite:///mlflow.db (made absolute
    against the current directory, so worker processes in other directories write the same file)."""
    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI") or study_uri or DEFAULT_URI
    return _absolute_sqlite(uri)


def _absolute_sqlite(uri: str) -> str:
    if not uri.startswith("sqlite:///") or uri.startswith("sqlite:////") or ":memory:" in uri:
        return uri
    query = uri.partition("?")[2]
    return f"sqlite:///{_sqlite_path(uri).absolute()}" + (f"?{query}" if query else "")


def missing_store(uri: str) -> Path | None:
    """The file a ``sqlite:///`` URI names when it does not exist yet (opening it would create an empty store)."""
    if not uri.startswith("sqlite:///") or ":memory:" in uri:
        return None
    path = _sqlite_path(uri)
    return None if path.exists() else path


@dataclass
class RunRecord:
    run_id: str
    status: str  # MLflow status: RUNNING, FINISHED, FAILED, KILLED
    tags: dict[str, str]
    params: dict[str, str]


@dataclass
class ParentRun:
    """An invocation's parent run while it is open (``Tracker.parent_run``)."""

    run_id: str
    failed: bool = False  # set by the invocation: the run ends FAILED rather than FINISHED


def _matches(error: BaseException | None, needles: tuple[str, ...]) -> bool:
    """Whether ``error`` or an error it wraps (the MLflow store wraps SQLAlchemy's, which wraps sqlite3's)
    mentions one of ``needles``."""
    for _ in range(32):  # a bounded walk down the chain
        if error is None:
            return False
        if any(needle in str(error).lower() for needle in needles):
            return True
        error = error.__cause__ or error.__context__
    return False


def _retry(call, *args, needles: tuple[str, ...] = _LOCKED, **kwargs):
    """``call(*args, **kwargs)``, again after a jittered, growing pause while it fails on a locked SQLite
    database (or, with ``needles``, another passing condition); re-raised after ``RETRY_SECONDS``."""
    rng = random.Random(os.getpid() ^ time.time_ns())  # no global RNG state
    deadline, attempt = time.monotonic() + RETRY_SECONDS, 0
    while True:
        try:
            return call(*args, **kwargs)
        except Exception as error:
            pause = min(2.0, 0.05 * 2 ** attempt) * (0.5 + rng.random())
            if not _matches(error, needles) or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            attempt += 1


@contextlib.contextmanager
def _init_lock(uri: str):
    """An exclusive flock on the directory of a SQLite store (no lock file left behind), so that one process
    at a time creates and migrates the file: concurrent migrations leave it broken, which no retry repairs."""
    descriptor = None
    if uri.startswith("sqlite:///") and ":memory:" not in uri:
        with contextlib.suppress(ImportError, OSError):
            import fcntl

            directory = _sqlite_path(uri).parent
            directory.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(directory, os.O_RDONLY)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)  # releases the lock


def _sqlite_path(uri: str) -> Path:
    return Path(uri.removeprefix("sqlite:///").partition("?")[0])


def _quiet_migrations() -> None:
    """Alembic announces each schema migration of a new SQLite file at INFO; warnings and errors still show."""
    for name in ("alembic", "alembic.runtime.migration", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            text = json.dumps(value, default=str) if isinstance(value, (list, tuple, dict)) else str(value)
            if len(text) > PARAM_VALUE_LIMIT:
                text = text[:PARAM_VALUE_LIMIT - len(TRUNCATED)] + TRUNCATED
            flat[f"{prefix}{key}"] = text
    return flat


def evaluation_artifact(mark: int, name: str) -> str:
    """Where a run's file ``name`` of evaluation point ``mark`` lands (``per_prompt_rewards.npz``,
    ``completions.json``): one spelling for the runner and the controls that write it and the report that reads it."""
    return f"evaluations/{mark:09d}/{name}"


def rollout_artifact(mark: int) -> str:
    """Where a run's step maps of the training steps up to evaluation point ``mark`` (since the previous one) land
    (``methods.diagnostics.merged_records``)."""
    return f"rollouts/{mark:09d}.npz"


def draw_artifact(draw: int) -> str:
    """Where a run's evaluation draw ``draw`` (1..D-1: start, end, hard subset) lands."""
    return f"evaluations/draws/{draw:02d}.npz"


def matched_artifact(draw: int) -> str:
    """Where a trained run's evaluation draw ``draw`` (0..D-1) at its own best temperature lands (start, end, hard
    subset; ``arena.runner.matched_decoding``)."""
    return f"evaluations/matched/{draw:02d}.npz"


def safe_name(name: str) -> str:
    """``name`` as one path component: letters, digits, '-', '_' and '.' kept, anything else '_'."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def flat_params(tree: dict) -> dict[str, str]:
    """The params ``Tracker.start_run`` logs for ``tree``: keys joined with dots, values as text (cut to 500)."""
    return _flatten(tree)


def _plain(value):
    """numpy scalars and arrays as Python numbers and lists, anything else as its text (for JSON)."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


class Tracker:
    """One experiment of one tracking store, written through explicit run ids (no fluent active run)."""

    def __init__(self, uri: str, experiment: str):
        from mlflow.tracking import MlflowClient

        _quiet_migrations()
        self.uri, self.experiment = uri, experiment
        with _init_lock(uri):
            self.client = _retry(MlflowClient, uri, needles=_RACY_INIT)
            self.experiment_id = _retry(self._experiment_id, needles=_RACY_INIT)

    def __reduce__(self):  # a tracker travels to worker processes as (uri, experiment)
        return Tracker, (self.uri, self.experiment)

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        location = None
        if self.uri.startswith("sqlite:///") and ":memory:" not in self.uri:  # beside the file, not in the cwd
            location = (_sqlite_path(self.uri).parent / "mlartifacts" / safe_name(self.experiment)).absolute().as_uri()
        try:
            return self.client.create_experiment(self.experiment, artifact_location=location)
        except MlflowException as error:  # another process created it in between
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise error
            return found.experiment_id

    def set_first_view(self, description: str, group_tag: str, sections: dict[str, list[list[str]]]) -> None:
        """What the UI shows at ``ui_url``: the runs in the model-training view, the Markdown ``description``
        above them, the runs grouped by the tag ``group_tag`` (nested children included: grouping flattens
        the tree; a group's line is its runs' mean, with their min-max band), and the charts of ``sections``,
        {section name: [metric keys of one line chart]}, before the charts MLflow generates for every other
        metric. Charts, groups and columns stay the user's to change."""
        charts, folds = [], []
        for number, (section, keyed) in enumerate(sections.items()):
            folds.append({"uuid": f"arena-section-{number}", "name": section, "display": True, "isReordered": False,
                          "deleted": False, "isGenerated": False})
            charts += [{"uuid": f"arena-chart-{number}-{index}", "type": "LINE", "metricSectionId": folds[-1]["uuid"],
                        "deleted": False, "isGenerated": False, "metricKey": keys[0], "selectedMetricKeys": keys,
                        "scaleType": "linear", "xAxisKey": "step", "xAxisScaleType": "linear", "lineSmoothness": 0,
                        "displayPoints": True, "runsCountToCompare": 100, "range": {}}
                       for index, keys in enumerate(keyed)]
        state = {"groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": group_tag}]},
                 "useGroupedValuesInCharts": True, "hideEmptyCharts": True, "compareRunSections": folds,
                 "isAccordionReordered": True,  # the sections in this order, not sorted by name
                 "compareRunCharts": charts}
        if len(description) > EXPERIMENT_TAG_LIMIT:
            description = description[:EXPERIMENT_TAG_LIMIT - len(TRUNCATED)] + TRUNCATED
        for key, value in ((NOTE, description), EXPERIMENT_KIND, (SHARED_VIEW + VIEW_KEY, json.dumps(state))):
            _retry(self.client.set_experiment_tag, self.experiment_id, key, value)

    def start_parent(self, name: str, tags: dict[str, str]) -> str:
        """The parent run of one invocation of ``arena run`` or ``arena tune``."""
        tags = {**{k: str(v) for k, v in tags.items()}, "arena.kind": "invocation"}
        return _retry(self.client.create_run, self.experiment_id, tags=tags, run_name=name).info.run_id

    @contextlib.contextmanager
    def parent_run(self, name: str, tags: dict[str, str]):
        """The parent run of one invocation, named ``name`` and the time, for the length of the ``with`` block:
        KILLED when the block raises (an interrupt, an error in arena), else FAILED when the block marked the
        ``ParentRun`` it got as failed (a run or an arm failed), else FINISHED."""
        parent = ParentRun(self.start_parent(f"{name} {time.strftime('%Y-%m-%d %H:%M:%S')}", tags))
        try:
            yield parent
        except BaseException:
            self.finish(parent.run_id, "KILLED")
            raise
        self.finish(parent.run_id, "FAILED" if parent.failed else "FINISHED")

    def start_run(self, name: str, parent_id: str | None, tags: dict[str, str], params: dict) -> str:
        """A child run per (arm, seed), its ``params`` flattened with dots and logged 100 per batch."""
        from mlflow.entities import Param

        tags = {k: str(v) for k, v in tags.items()}
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        run_id = _retry(self.client.create_run, self.experiment_id, tags=tags, run_name=name).info.run_id
        for chunk in _chunks([Param(k, v) for k, v in _flatten(params).items()], 100):
            _retry(self.client.log_batch, run_id, params=chunk)
        return run_id

    def find_runs(self, tags: dict[str, str]) -> list[RunRecord]:
        """Active runs of this experiment whose tags all match, newest first."""
        tags = {k: str(v) for k, v in tags.items()}
        quotable = {k: v for k, v in tags.items() if "'" not in v and "`" not in k}
        query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in quotable.items())
        found, token = [], None
        while True:
            page = _retry(self.client.search_runs, [self.experiment_id], filter_string=query, max_results=1000,
                          order_by=["attributes.start_time DESC"], page_token=token)
            found += [RunRecord(r.info.run_id, r.info.status, dict(r.data.tags), dict(r.data.params))
                      for r in page if all(r.data.tags.get(k) == v for k, v in tags.items())]
            token = page.token
            if not token:
                return found

    def reopen(self, run_id: str) -> None:
        """Status back to RUNNING, to continue logging into an interrupted run (resume)."""
        _retry(self.client.update_run, run_id, status="RUNNING")

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        _retry(self.client.set_terminated, run_id, status)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int, timestamp_ms: int | None = None) -> None:
        self.log_rows(run_id, [(k, v, step) for k, v in metrics.items()], timestamp_ms)

    def log_rows(self, run_id: str, rows: list[tuple[str, float, int]], timestamp_ms: int | None = None) -> None:
        """(key, value, step) rows, 1000 per batch (MLflow's limit)."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        metrics = [Metric(key, float(value), stamp, int(step)) for key, value, step in rows]
        for chunk in _chunks(metrics, 1000):
            _retry(self.client.log_batch, run_id, metrics=chunk)

    def log_missing(self, run_id: str, rows: list[tuple[str, float, int]]) -> int:
        """Logs the rows whose (key, step) the run's history lacks (counted with multiplicity), so that logging
        the same rows again adds nothing; returns how many were logged."""
        have = Counter((key, step) for key in {r[0] for r in rows} for step, _ in self.history(run_id, key))
        missing = []
        for key, value, step in rows:
            if have[(key, int(step))] > 0:
                have[(key, int(step))] -= 1
            else:
                missing.append((key, value, step))
        self.log_rows(run_id, missing)
        return len(missing)

    def metric_keys(self, run_id: str) -> list[str]:
        """The keys of every metric the run has logged, sorted."""
        return sorted(_retry(self.client.get_run, run_id).data.metrics)

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of metric ``key``, sorted by step (then time)."""
        points = _retry(self.client.get_metric_history, run_id, key)
        return [(m.step, m.value) for m in sorted(points, key=lambda m: (m.step, m.timestamp))]

    def log_text(self, run_id: str, text: str, artifact_path: str) -> None:
        _retry(self.client.log_text, run_id, text, artifact_path)

    def log_file(self, run_id: str, path, artifact_dir: str | None = None) -> None:
        _retry(self.client.log_artifact, run_id, str(path), artifact_dir)

    def log_table(self, run_id: str, rows: list[dict], artifact_path: str) -> None:
        """Rows as a JSON list of records; the path carries the step, so the next evaluation never overwrites it
        (MlflowClient.log_table would append to an existing file and grow a run tag on every call)."""
        self.log_text(run_id, json.dumps(rows, indent=1, default=_plain), artifact_path)

    def log_npz(self, run_id: str, arrays: dict, artifact_path: str) -> None:
        """Numpy arrays (per-prompt rewards) as one ``.npz`` artifact."""
        import numpy as np

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / Path(artifact_path).name
            with open(path, "wb") as stream:
                np.savez_compressed(stream, **arrays)
            self.log_file(run_id, path, posixpath.dirname(artifact_path) or None)

    def log_figure(self, run_id: str, figure, artifact_path: str) -> None:
        _retry(self.client.log_figure, run_id, figure, artifact_path)

    def download(self, run_id: str, artifact_path: str, dst) -> Path:
        Path(dst).mkdir(parents=True, exist_ok=True)
        return Path(_retry(self.client.download_artifacts, run_id, artifact_path, str(dst)))

    # -- run archives (arena.archive): a finished run as data, and back ---------------------------------------

    def run_record(self, run_id: str) -> dict:
        """Everything the store holds of a run except its artifacts, as JSON-ready data: name, status, times,
        tags, params and every metric's whole history as [step, timestamp, value] rows."""
        run = _retry(self.client.get_run, run_id)
        metrics = {}
        for key in sorted(run.data.metrics):
            points = sorted(_retry(self.client.get_metric_history, run_id, key), key=lambda m: (m.step, m.timestamp))
            metrics[key] = [[m.step, m.timestamp, m.value] for m in points]
        return {"run_id": run_id, "run_name": run.info.run_name, "status": run.info.status,
                "start_time": run.info.start_time, "end_time": run.info.end_time, "tags": dict(run.data.tags),
                "params": dict(run.data.params), "metrics": metrics}

    def download_all(self, run_id: str, dst) -> Path:
        """Every artifact of the run, its folder tree kept, under ``dst``."""
        return self.download(run_id, "", dst)

    def has_run(self, run_id: str) -> bool:
        """Whether this experiment holds an active run with this id."""
        from mlflow.exceptions import MlflowException

        try:
            run = _retry(self.client.get_run, run_id)
        except MlflowException:
            return False
        return run.info.experiment_id == self.experiment_id and run.info.lifecycle_stage == "active"

    def restore_run(self, record: dict, artifacts: Path | None, parent_id: str | None) -> str:
        """A new run holding what ``run_record`` returned (and the artifact folder ``artifacts``), with its
        original start and end times and metric timestamps, as a child of ``parent_id``; FAILED if a step fails
        part way, so that a half-restored run is never taken for a finished one."""
        from mlflow.entities import Metric, Param

        tags = {key: value for key, value in record["tags"].items() if key != "mlflow.parentRunId"}
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        run_id = _retry(self.client.create_run, self.experiment_id, start_time=record["start_time"], tags=tags,
                        run_name=record["run_name"]).info.run_id
        try:
            for chunk in _chunks([Param(k, v) for k, v in record["params"].items()], 100):
                _retry(self.client.log_batch, run_id, params=chunk)
            rows = [Metric(key, float(value), int(stamp), int(step))
                    for key, points in record["metrics"].items() for step, stamp, value in points]
            for chunk in _chunks(rows, 1000):
                _retry(self.client.log_batch, run_id, metrics=chunk)
            if artifacts is not None:
                _retry(self.client.log_artifacts, run_id, str(artifacts))
        except BaseException:
            self.finish(run_id, "FAILED")
            raise
        _retry(self.client.set_terminated, run_id, record["status"], end_time=record["end_time"])
        return run_id


def ui_url(base: str, uri: str, experiment: str | None) -> str:
    """The address of ``experiment``'s first view (``Tracker.set_first_view``) in the MLflow UI at ``base``;
    ``base`` itself when the store has no such experiment (or none is named). Opening it creates nothing."""
    from mlflow.tracking import MlflowClient

    found = _retry(MlflowClient(uri).get_experiment_by_name, experiment) if experiment else None
    if found is None:
        return base
    view = f"&viewStateShareKey={VIEW_KEY}" if SHARED_VIEW + VIEW_KEY in found.tags else ""
    return f"{base}/#/experiments/{found.experiment_id}/runs?workflowType=machine_learning&compareRunsMode=CHART{view}"


class NullTracker:
    """The tracker of the ranks other than 0 of one run across processes (``torchrun``, ``accelerate launch``):
    rank 0 alone talks to MLflow, so every ``Tracker`` call here does nothing, and a search finds no runs."""

    def find_runs(self, tags: dict[str, str]) -> list[RunRecord]:
        return []

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy and pickle probe for special methods: there are none
            raise AttributeError(name)
        return _nothing


def _nothing(*args, **kwargs) -> None:
    return None
