"""A study's results read back from MLflow through ``arena.tracking``, never from in-memory state: a study
run earlier, on another machine or against a remote tracking server reports the same.

Which runs, for each (arm, seed) of the study as it is now (under its profile), among the FINISHED child runs
tagged with the study's name, newest first:

1. the run whose ``arena.config_hash`` is the (arm, seed)'s hash: how ``arena run`` knows a run is done;
2. else a run whose logged params agree with the study on every parameter the run logged, and lacks only
   options the study does not set (options the code gained after the run, at their defaults; counted in
   ``Results.predating`` and listed in the summary).

Not every run tagged with the study: a study edited after it ran (another lr, budget or evaluation) keeps
its name, and its old runs would mix into the new arm's curves. Not the hash alone either: a method that
gains an option invalidates every earlier run's hash though nothing the study says has changed. Finished
runs of the study that match neither way are counted (``stale``) and left out. ``arena run``'s printed
summary picks its runs here too, so the report and the summary describe the same runs.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field

import numpy as np

from arena import budget
from arena.budget import UNITS
from arena.tracking import draw_artifact, evaluation_artifact, flat_params, matched_artifact

CURVE_KEYS = ("eval/tail_reward", "eval/tail_gain", "eval/mean_reward", *(f"budget/{unit}" for unit in UNITS))
LEVEL_KEY = re.compile(r"eval/level(\d+)_mean_reward")


class ReportError(Exception):
    """Nothing to report (no finished run at the study's configuration), or a run lacks what it should hold."""


@dataclass
class SeedRun:
    """One finished (arm, seed) run, or a control: its curves at the study's evaluation marks (a control: at the
    last mark only) and its per-prompt rewards on every evaluation draw."""

    arm: str
    seed: int
    run_id: str
    curves: dict[str, np.ndarray] = field(default_factory=dict)  # metric key -> value at each mark
    start_rewards: np.ndarray | None = None  # (prompts, k) reward of every evaluation sample at the first mark
    end_rewards: np.ndarray | None = None  # the same at the last mark
    hard: np.ndarray | None = None  # (prompts,) the hard subset of draw 0
    other_draws: list = field(default_factory=list)  # draws 1..D-1: {"start", "end", "hard"} arrays
    matched: list = field(default_factory=list)  # draws 0..D-1 at the run's own best temperature, likewise
    temperature: float | None = None  # τ that matched decoding chose (None: the run has none)

    @property
    def start(self) -> np.ndarray:
        """Per-prompt reward (mean over the k samples) at the first mark."""
        return self.start_rewards.mean(axis=1)

    @property
    def end(self) -> np.ndarray:
        return self.end_rewards.mean(axis=1)


@dataclass
class Results:
    study: object  # arena.study.Study
    marks: np.ndarray  # the evaluation marks, in the study's budget unit
    arms: dict[str, list[SeedRun]]  # in the study's arm order; an arm without a finished run is left out
    missing: list[tuple[str, int]]  # (arm, seed) without a finished run at the study's configuration
    stale: int  # finished runs of the study at another configuration, left out
    parent_id: str | None  # the study's latest parent run (an ``arena run`` invocation), if any
    levels: list[int]  # difficulty levels with a ``eval/level<L>_mean_reward`` curve
    predating: dict = field(default_factory=dict)  # (arm, seed) -> options its run predates (see above)
    controls: dict[str, SeedRun] = field(default_factory=dict)  # the study's controls that have finished

    def values(self, arm: str, key: str) -> np.ndarray:
        """(seeds, marks) array of ``key`` for ``arm`` ((1, 1) for a control: its last mark)."""
        runs = [self.controls[arm]] if arm in self.controls else self.arms[arm]
        return np.array([run.curves[key] for run in runs])

    def draws(self, arm: str, which: tuple[int, ...] | None = None) -> list:
        """The arm's (or control's) per-prompt rewards on each evaluation draw its runs all have
        (``arena.report.stats.Draw``: start and end per seed, the hard subset); ``which``: those draws only."""
        from arena.report.stats import Draw

        runs = [self.controls[arm]] if arm in self.controls else self.arms[arm]
        count = 1 + min(len(run.other_draws) for run in runs)
        out = [Draw(np.stack([run.start for run in runs]), np.stack([run.end for run in runs]), runs[0].hard)]
        out += [_draw([run.other_draws[d] for run in runs]) for d in range(count - 1)]
        return out if which is None else [out[d] for d in which]

    def pooled(self, arm: str) -> list:
        """The draws the study's verdicts pool (``Study.pooled_draws``)."""
        return self.draws(arm, self.study.pooled_draws())

    def has_matched(self, arm: str) -> bool:
        """Whether every finished seed of trained ``arm`` was also evaluated at its own best temperature."""
        return arm in self.arms and all(run.matched for run in self.arms[arm])

    def matched_pooled(self, arm: str) -> list:
        """The pooled draws of trained ``arm`` at each seed's own best temperature (``has_matched``): the start at
        the study's temperature, the end at the run's τ."""
        runs = self.arms[arm]
        return [_draw([run.matched[d] for run in runs]) for d in self.study.pooled_draws()]


def _draw(saved: list[dict]):
    """A ``stats.Draw`` from each seed's saved {"start", "end", "hard"} (rewards per sample)."""
    from arena.report.stats import Draw

    return Draw(np.stack([s["start"].mean(axis=1) for s in saved]), np.stack([s["end"].mean(axis=1) for s in saved]),
                saved[0]["hard"])


def marks_of(study) -> list[int]:
    """The metric steps of the study's evaluation points, as the runner logs them."""
    return budget.marks(study.budget.amount, study.evaluation.points)


@dataclass
class Found:
    runs: dict  # (arm, seed) -> the chosen RunRecord
    predating: dict  # (arm, seed) -> option params the chosen run lacks (it predates them), when not matched by hash
    stale: int  # finished runs of an (arm, seed) of the study at another configuration of it
    parents: list  # the study's parent runs (invocations), newest first


def predates(record, run) -> list[str] | None:
    """None when the run ``record`` logged contradicts ``run`` (a RunSpec) in a parameter; else the option
    params it lacks, each one the study leaves at its default."""
    lacking = []
    for key, value in flat_params(run.resolved()).items():
        if key == "config_hash":
            continue
        if key not in record.params:
            if not key.startswith("options.") or key.split(".")[1] in run.options:
                return None
            lacking.append(key)
        elif record.params[key] != value:
            return None
    return lacking


def finished_runs(tracker, runs) -> Found:
    """The finished run of each of ``runs`` (``RunSpec`` of one study) by the rule above."""
    wanted = {(run.arm, str(run.seed)): run for run in runs}
    chosen, predating, parents, candidates = {}, {}, [], {}
    for record in tracker.find_runs({"arena.study": runs[0].study}):  # newest first
        if record.tags.get("arena.kind") == "invocation":
            parents.append(record)
        elif record.status == "FINISHED" and (record.tags.get("arena.arm"), record.tags.get("arena.seed")) in wanted:
            candidates.setdefault((record.tags["arena.arm"], record.tags["arena.seed"]), []).append(record)
    stale = 0
    for key, run in wanted.items():  # in the study's order
        records = candidates.get(key, [])
        exact = [r for r in records if r.tags.get("arena.config_hash") == run.config_hash]
        agreeing = [(r, predates(r, run)) for r in records if r not in exact]
        agreeing = [(r, lacking) for r, lacking in agreeing if lacking is not None]
        stale += len(records) - len(exact) - len(agreeing)
        if exact:
            chosen[(run.arm, run.seed)] = exact[0]
        elif agreeing:
            chosen[(run.arm, run.seed)], predating[(run.arm, run.seed)] = agreeing[0]
    return Found(chosen, predating, stale, parents)


def _curve(tracker, run_id: str, key: str, marks: list[int]) -> np.ndarray:
    at = dict(tracker.history(run_id, key))  # the last value logged at a step wins
    missing = [mark for mark in marks if mark not in at]
    if missing:
        raise ReportError(f"run {run_id} has no {key} at step(s) {missing} (the study's evaluation marks)")
    return np.array([at[mark] for mark in marks], dtype=float)


def _arrays(tracker, run_id: str, path: str) -> dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory() as folder:
        try:
            local = tracker.download(run_id, path, folder)
        except Exception as error:  # MLflow raises its own errors or OSError for a missing artifact
            raise ReportError(f"run {run_id} has no artifact {path} ({type(error).__name__})") from error
        with np.load(local) as saved:
            return {key: saved[key] for key in saved.files}


def read_seed_run(tracker, arm: str, seed: int, run_id: str, marks: list[int], draws: int = 1) -> SeedRun:
    """A run's curves at ``marks`` (a control: ``marks`` is the last one), its per-prompt rewards at the first and
    last of the study's marks, and those of evaluation draws 1..draws-1."""
    keys = [*CURVE_KEYS, *(k for k in tracker.metric_keys(run_id) if LEVEL_KEY.fullmatch(k))]
    start = _arrays(tracker, run_id, evaluation_artifact(marks[0], "per_prompt_rewards.npz"))
    end = _arrays(tracker, run_id, evaluation_artifact(marks[-1], "per_prompt_rewards.npz"))
    other = [_arrays(tracker, run_id, draw_artifact(d)) for d in range(1, draws)]
    chosen = tracker.history(run_id, "matched/temperature")  # none: a control, or a run without matched decoding
    matched = [_arrays(tracker, run_id, matched_artifact(d)) for d in range(draws)] if chosen else []
    return SeedRun(arm, seed, run_id, {key: _curve(tracker, run_id, key, marks) for key in keys},
                   start["rewards"], end["rewards"], start.get("hard"), other, matched,
                   chosen[-1][1] if chosen else None)


def draw_at(tracker, results: Results, arm: str, mark: float):
    """Draw 0 of ``arm`` with its per-prompt rewards at evaluation ``mark`` as the end (``stats.Draw``): the start
    and hard subset of every run, the rewards each run logged at that mark."""
    from arena.report.stats import Draw

    runs = results.arms[arm]
    at = [_arrays(tracker, run.run_id, evaluation_artifact(budget.mark_of(mark), "per_prompt_rewards.npz"))["rewards"]
          for run in runs]
    return Draw(np.stack([run.start for run in runs]), np.stack([rewards.mean(axis=1) for rewards in at]), runs[0].hard)


def finished_control(tracker, control):
    """The newest finished run (``RunRecord``) of ``control`` (``arena.study.ControlSpec``) at its config hash,
    if any."""
    found = [r for r in tracker.find_runs({"arena.study": control.study, "arena.control": control.arm,
                                           "arena.config_hash": control.config_hash}) if r.status == "FINISHED"]
    return found[0] if found else None


def read_control(tracker, control, marks: list[int]) -> SeedRun | None:
    """The newest finished run of ``control`` at its config hash, if any."""
    found = finished_control(tracker, control)
    if found is None:
        return None
    run = read_seed_run(tracker, control.arm, 0, found.run_id, [marks[-1]], control.evaluation.draws)
    run.start_rewards = _arrays(tracker, found.run_id, evaluation_artifact(marks[0], "per_prompt_rewards.npz"))["rewards"]
    return run


def read_results(tracker, study) -> Results:
    """Every finished run of ``study`` at its current configuration, read from ``tracker``'s store."""
    runs = study.runs()
    marks = marks_of(study)
    found = finished_runs(tracker, runs)
    if not found.runs:
        other = (f"; {found.stale} finished runs of it have another configuration (the study changed since)"
                 if found.stale else "")
        raise ReportError(f"no finished run of study {study.name!r} at its current configuration in {tracker.uri} "
                          f"(experiment {tracker.experiment}){other}: run 'arena run {study.source_path}' first")
    arms: dict[str, list[SeedRun]] = {}
    for run in runs:  # arms in the study's order, seeds in its order
        if (run.arm, run.seed) in found.runs:
            run_id = found.runs[(run.arm, run.seed)].run_id
            arms.setdefault(run.arm, []).append(read_seed_run(tracker, run.arm, run.seed, run_id, marks,
                                                              study.evaluation.draws))
    levels = sorted({int(LEVEL_KEY.fullmatch(k).group(1)) for seeds in arms.values() for run in seeds
                     for k in run.curves if LEVEL_KEY.fullmatch(k)})
    controls = {spec.arm: read_control(tracker, spec, marks) for spec in study.control_specs()}
    return Results(study, np.array(marks, dtype=float), arms,
                   [(run.arm, run.seed) for run in runs if (run.arm, run.seed) not in found.runs], found.stale,
                   found.parents[0].run_id if found.parents else None, levels, found.predating,
                   {name: run for name, run in controls.items() if run is not None})
