"""The sweep: a trial as an Optuna objective (a run of the arm on the tune's settings per seed, reported to the
pruner at each evaluation point), the workers that claim trials until every arm has its share, and the outcome
(the table, best.yaml)."""
from __future__ import annotations

import copy
import functools
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from arena.budget import mark_of
from arena.config import StudyError
from arena.processes import run_in_slots
from arena.profiles import apply_profile
from arena.report.stats import area_under_curve
from arena.report.tables import arm_width
from arena.runner import RUN_FAILURES, Stop, checkpoint_file, execute, identity_tags
from arena.scheduler import invocation
from arena.study import validate
from arena.tracking import Tracker
from arena.tune.spec import Tune, describe_pruner, describe_sampler
from arena.tune.trials import (ERROR, RETRY_OF, Counts, claim, counts, fail_stale, heartbeat, next_arm, open_storage,
                               open_studies, sampler_for, tell)


# ---------------------------------------------------------------------------------------------
# the objective


def objective_value(objective: str, curve: list[tuple[int, float, float]]) -> float:
    """The objective of a curve of (mark, tail_reward, tail_gain) so far (at least two points): its running
    value. ``tail_auc`` is ``arena report``'s tail-reward AUC: the curve's average over its budget span."""
    if objective == "tail_gain":
        return curve[-1][2]
    return float(area_under_curve([m for m, _, _ in curve], [r for _, r, _ in curve]))


def curve_of(tracker, run_id: str) -> list[tuple[int, float, float]]:
    """(mark, tail_reward, tail_gain) at each evaluation point of a run, from MLflow."""
    rewards = dict(tracker.history(run_id, "eval/tail_reward"))
    gains = dict(tracker.history(run_id, "eval/tail_gain"))
    return [(mark, rewards[mark], gains[mark]) for mark in sorted(rewards) if mark in gains]


@dataclass
class Curve:
    """One seed's run as the trial sees it (``execute``'s ``on_evaluation``): its curve so far (a resumed run's
    starts with the points it logged before the interruption, read back from MLflow), the running objective
    reported at step ``offset + mark`` (the seeds follow one another), and ``Stop`` when the pruner says so,
    except at the trial's last mark (``end``, on its last seed; None on the others)."""

    trial: optuna.Trial
    objective: str
    tracker: Tracker
    identity: dict  # the run's tags, to find what it logged before
    offset: float
    end: int | None
    stopped: str  # where a pruned trial stopped, after the mark: its unit, and which seed
    points: list = field(default_factory=list)
    reported: int = 0  # the points whose running value went to the trial

    def __call__(self, mark, metrics) -> None:
        if not self.points and mark > 0:  # resumed
            found = self.tracker.find_runs(self.identity)
            self.points += [p for p in curve_of(self.tracker, found[0].run_id) if p[0] < mark] if found else []
        self.points.append((mark, metrics["tail_reward"], metrics["tail_gain"]))
        if mark == 0:  # the starting evaluation is every trial's: nothing to compare
            return
        for end in range(max(2, self.reported + 1), len(self.points) + 1):
            self.trial.report(objective_value(self.objective, self.points[:end]),
                              int(self.offset + self.points[end - 1][0]))
        self.reported = len(self.points)
        if not (self.end is not None and mark >= self.end) and self.trial.should_prune():
            raise Stop(f"at {mark:g} {self.stopped}")


@dataclass
class Worker:
    """What a worker's trials run with: the tune, the tracker and parent run they log to, where their runs go."""

    tune: Tune
    tracker: Tracker
    parent_id: str
    workdir: Path
    device: str | None = None
    position: int = 0
    progress: bool = True

    @property
    def shared(self) -> Path:
        return Path(self.workdir) / "tune" / self.tune.name

    def folder(self, arm: str, trial) -> Path:
        """The trial's runs (and their checkpoints): a retry's are its first trial's, which it resumes."""
        return self.shared / arm / f"trial{first_trial(trial)}"


def first_trial(trial) -> int:
    return int(trial.user_attrs.get(RETRY_OF, trial.number))


def objective(trial: optuna.Trial, arm: str, worker: Worker) -> float:
    """The trial's value: the mean over the tune's seeds of the objective of the arm's run with the sampled
    options (each reported to the pruner as it evaluates: ``Curve``; ``Stop`` when pruned)."""
    tune, tracker = worker.tune, worker.tracker
    params = {option: distribution.suggest(trial, option) for option, distribution in tune.space[arm].items()}
    study = tune.study_for(arm, {**tune.base.arms[arm].options, **params})
    folder, extra = worker.folder(arm, trial), {"arena.tune": tune.name, "arena.trial": str(first_trial(trial))}
    runs, span, values = study.runs(), tune.settings.budget.amount, []
    for i, run in enumerate(runs):
        identity = identity_tags(run, extra)
        for previous in tracker.find_runs(identity):  # a retry without a checkpoint starts a new run
            if previous.status in ("RUNNING", "KILLED") and not checkpoint_file(folder, run).exists():
                tracker.finish(previous.run_id, "FAILED")
        curve = Curve(trial, tune.objective, tracker, identity, i * span,
                      mark_of(span) if i == len(runs) - 1 else None,
                      run.budget_unit + (f" of seed {run.seed}" if len(runs) > 1 else ""))
        outcome = execute(run, study, tracker, worker.parent_id, folder, worker.device, worker.position, False,
                          worker.progress, curve, extra, caches=worker.shared)  # every trial starts from one model
        trial.set_user_attr(f"arena.run_id.seed{run.seed}", outcome.run_id)
        values.append(objective_value(tune.objective, curve_of(tracker, outcome.run_id)))
    return sum(values) / len(values)


# ---------------------------------------------------------------------------------------------
# running trials


@dataclass
class TrialResult:
    arm: str
    number: int
    state: str  # finished | pruned | failed | dropped (taken for dead by another worker, and queued again)
    value: float | None = None
    params: dict = field(default_factory=dict)
    error: str = ""  # why it failed, or where it was pruned


def run_trial(worker: Worker, study: optuna.Study, trial, arm: str) -> TrialResult:
    """The objective of one trial, told to Optuna: finished, pruned, failed (a run failed), or interrupted (failed,
    and queued again with its options: the next invocation resumes it from its checkpoints)."""
    result = TrialResult(arm, trial.number, "failed")
    with heartbeat(trial):
        try:
            result.value = objective(trial, arm, worker)
            result.state, told = "finished", tell(study, trial, result.value)
        except Stop as stop:
            result.state, result.error = "pruned", str(stop)
            told = tell(study, trial, state=TrialState.PRUNED)
        except optuna.exceptions.UpdateFinishedTrialError:  # reporting to a trial another worker failed as stale
            told = False
        except RUN_FAILURES as error:
            result.error = f"{type(error).__name__}: {error}"
            told = tell(study, trial, state=TrialState.FAIL, error=result.error)
        except BaseException:
            if tell(study, trial, state=TrialState.FAIL):
                study.enqueue_trial(trial.params, user_attrs={RETRY_OF: first_trial(trial)}, skip_if_exists=False)
            raise
    result.params = trial.params
    if not told:  # another worker took it for dead and queued a retry, which resumes from the checkpoints
        result.state, result.value = "dropped", None
        return result
    shutil.rmtree(worker.folder(arm, trial), ignore_errors=True)
    return result


def describe(result: TrialResult, tune: Tune, done: Counts) -> str:
    value = f"{tune.objective} {result.value:+.4f}, " if result.value is not None else ""
    options = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.params.items())
    tail = f" {result.error}" if result.state == "pruned" else f": {result.error}" if result.error else ""
    return (f"{result.arm} trial {result.number} ({options}): {value}{result.state}{tail} "
            f"[{done.finished + done.pruned} of {tune.trials_per_arm} finished or pruned]")


def work(_, device: str | None, slot: int, tune: Tune, storage_url: str, tracker, parent_id: str, workdir: Path,
         progress: bool) -> list[TrialResult]:
    """A worker (``run_in_slots``' task, on a slot's device): trials of the arm with the fewest until every arm has
    its trials."""
    worker = Worker(tune, tracker, parent_id, Path(workdir), device, slot, progress)
    studies = open_studies(tune, open_storage(storage_url))
    results = []
    while (arm := next_arm(tune, studies)) is not None:
        trial = claim(tune, studies[arm])
        if trial is None:
            continue
        result = run_trial(worker, studies[arm], trial, arm)
        results.append(result)
        print(describe(result, tune, counts(studies[arm])), flush=True)
    return results


# ---------------------------------------------------------------------------------------------
# the sweep and its outcome


@dataclass
class ArmOutcome:
    arm: str
    counts: Counts
    best_value: float | None = None
    best_trial: int | None = None
    best_params: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def outcomes(tune: Tune, studies: dict) -> list[ArmOutcome]:
    found = []
    for arm in tune.tuned:
        study = studies[arm]
        outcome = ArmOutcome(arm, counts(study))
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        if complete:
            best = max(complete, key=lambda t: (t.value, -t.number))
            outcome.best_value, outcome.best_trial, outcome.best_params = best.value, best.number, dict(best.params)
        outcome.errors = [t.user_attrs[ERROR] for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                          if ERROR in t.user_attrs]
        found.append(outcome)
    return found


def table(tune: Tune, found: list[ArmOutcome]) -> str:
    width = arm_width(o.arm for o in found)
    lines = [f"{'arm':<{width}} {'best ' + tune.objective:>16} {'finished':>8} {'pruned':>6} {'failed':>6} "
             f"{'best trial':>10}  best options"]
    for o in found:
        best = f"{o.best_value:+.4f}" if o.best_value is not None else "-"
        options = ", ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in o.best_params.items())
        lines.append(f"{o.arm:<{width}} {best:>16} {o.counts.finished:>8} {o.counts.pruned:>6} {o.counts.failed:>6} "
                     f"{'-' if o.best_trial is None else o.best_trial:>10}  {options or '-'}")
    lines.append(f"best {tune.objective}: the best trial's own value, no interval (the maximum of noisy trials runs high: "
                 "rerun the winner on fresh seeds with arena run and read its interval there, docs/reporting.md)")
    return "\n".join(lines)


def snippet(tune: Tune, found: list[ArmOutcome]) -> str:
    """The tuned arms as written in the study, with their best options, as an ``arms:`` section that validates
    in the study (an arm tuned apart from a reference of the same method says so in confounded_because)."""
    base, arms = tune.base, {}
    for o in found:
        if o.best_trial is None:
            continue
        entry = copy.deepcopy(tune.study_raw["arms"][o.arm])
        if base.profile:  # the profile's settings replace options; an arm's at: block goes on top
            at = entry.setdefault("at", {})
            at[base.profile] = {**(at.get(base.profile) or {}), **o.best_params}
        else:
            entry["options"] = {**(entry.get("options") or {}), **o.best_params}
        arms[o.arm] = entry
    raw = tune.study_raw
    # confounded_because on every tuned arm, so that the study validates whatever the tuned options changed; then
    # off again where the study says the arm still differs from its reference in one variable
    marked = [arm for arm, entry in arms.items() if not entry.get("confounded_because")]
    for arm in marked:
        arms[arm]["confounded_because"] = f"options tuned separately by arena tune ({tune.name})"
    invalid = []
    try:
        study = validate(apply_profile({**raw, "arms": {**raw["arms"], **arms}}, base.profile or None),
                         base.source_path)
    except StudyError as error:
        invalid = [f"{p.path}: {p.message}" for p in error.problems]
    else:
        for arm in marked:
            if arm == study.reference or len(study.differences(arm)) == 1:
                del arms[arm]["confounded_because"]
    tuned_on = sorted(set(base.all_seeds()) & set(tune.settings.seeds))
    header = [f"# arena tune {tune.source_path}: the best of {tune.trials_per_arm} trials per arm by {tune.objective}",
              f"# (budget {tune.settings.budget.amount:g} {tune.settings.budget.unit}, seeds "
              f"{list(tune.settings.seeds)}, evaluation {tune.settings.evaluation.split} split seed "
              f"{tune.settings.evaluation.seed}"
              + (f", profile {base.profile}" if base.profile else "") + ")",
              f"# sampler {describe_sampler(tune)}; pruner {describe_pruner(tune.pruner)}",
              f"# paste over the arms of the same names in {base.source_path}, then: arena run {base.source_path}"
              + (f" --profile {base.profile}" if base.profile else ""),
              f"# tuning seeds: {list(tune.settings.seeds)}. The best of many trials on these seeds is biased up (the "
              "winner's curse): confirm it on seeds tuning never used before a study relies on it"
              + (f" (the study's {base.all_seeds()} are such seeds)" if not tuned_on
                 else f" (WARNING: the study's seeds {tuned_on} were tuned on)")]
    missing = [o.arm for o in found if o.best_trial is None]
    if missing:
        header.append(f"# no finished trial (not here): {', '.join(missing)}")
    header += [f"# does not validate in the study: {line}" for line in invalid]
    return "\n".join(header) + "\n" + yaml.safe_dump({"arms": arms}, sort_keys=False)


@dataclass
class SweepResult:
    arms: list[ArmOutcome]
    trials: list[TrialResult]  # those of this invocation
    snippet_path: Path
    gave_up: list[ArmOutcome]  # arms that stopped short of trials_per_arm after as many failed trials


def sweep(tune: Tune, placement, tracking_uri: str | None, workdir: Path, out: Path,
          progress: bool = True) -> SweepResult:
    """Trials until every arm has ``trials_per_arm`` finished or pruned ones, under one MLflow parent run;
    prints the best per arm and writes ``out/best.yaml``."""
    tracker, parent_run = invocation(tune.settings, tracking_uri, {
        "arena.tune": tune.name, "arena.base_study": tune.base.name, "arena.objective": tune.objective,
        "arena.optuna": optuna.__version__, "arena.sampler": repr(sampler_for(tune, tune.tuned[0])),
        "arena.pruner": repr(tune.pruner), "arena.tune_seeds": ",".join(map(str, tune.settings.seeds))})
    storage_url = tune.storage_url(workdir)
    studies = open_studies(tune, open_storage(storage_url))
    for arm in tune.tuned:
        for number in fail_stale(studies[arm]):
            print(f"{arm} trial {number}: its process is gone; retried with the same options", flush=True)
    print(f"arena tune {tune.name}: {len(tune.tuned)} arms x {tune.trials_per_arm} trials, objective {tune.objective}, "
          f"evaluation {tune.settings.evaluation.split} split seed {tune.settings.evaluation.seed}, "
          f"seeds {list(tune.settings.seeds)}, sampler {describe_sampler(tune)}, pruner {describe_pruner(tune.pruner)}, "
          f"{placement.slots} at a time, storage {storage_url}, "
          f"tracking {tracker.uri} (experiment {tracker.experiment})", flush=True)
    if (tune.settings.evaluation.split, tune.settings.evaluation.seed) == (tune.base.evaluation.split,
                                                                           tune.base.evaluation.seed):
        print(f"warning: evaluation {tune.base.evaluation.split} split seed {tune.base.evaluation.seed} is the study's: "
              "the settings are selected on the prompts that report the results (the default is the train split, "
              "seed the study's + 1)", flush=True)
    with parent_run as parent:
        tracker.log_text(parent.run_id, Path(tune.source_path).read_text(), "tune.yaml")
        started = time.time()
        task = functools.partial(work, tune=tune, storage_url=storage_url, tracker=tracker, parent_id=parent.run_id,
                                 workdir=Path(workdir), progress=progress)  # a worker per slot
        trials = [trial for found in run_in_slots(placement, task, range(placement.slots)) for trial in found]
        result = write_outcome(tune, studies, trials, tracker, parent.run_id, Path(out))
        parent.failed = bool(result.gave_up)
    ran = {state: sum(t.state == state for t in trials) for state in ("finished", "pruned", "failed")}
    print(f"\n{len(trials)} trials in this invocation ({ran['finished']} finished, {ran['pruned']} pruned, "
          f"{ran['failed']} failed) in {time.time() - started:.0f} s\n")
    print(table(tune, result.arms))
    print(f"\nwrote {result.snippet_path}: paste its arms into {tune.base.source_path}, then arena run and "
          "arena report")
    return result


def write_outcome(tune: Tune, studies: dict, trials: list[TrialResult], tracker, parent_id: str,
                  out: Path) -> SweepResult:
    """The best trial per arm: ``out/best.yaml`` (the snippet), also logged to the parent run with the best values."""
    found = outcomes(tune, studies)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "best.yaml"
    text = snippet(tune, found)
    path.write_text(text)
    tracker.log_text(parent_id, text, "best.yaml")
    tracker.log_metrics(parent_id, {f"tune/best_{o.arm}": o.best_value for o in found if o.best_value is not None}, 0)
    return SweepResult(found, trials, path, [o for o in found if o.counts.failed >= tune.trials_per_arm and
                                             o.counts.finished + o.counts.pruned < tune.trials_per_arm])
