"""The sweep: one trial as a run of the arm on the tune's settings (reported to the pruner at each evaluation
point), the workers that claim trials until every arm has its share, and the outcome (the table, best.yaml)."""
from __future__ import annotations

import copy
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from arena.config import StudyError, read_yaml
from arena.processes import worker_pool, worker_slot
from arena.report.tables import arm_width
from arena.runner import (RUN_FAILURES, Stop, checkpoint_file, execute, git_commit, identity_tags, require_weights,
                          start_caches)
from arena.study import validate
from arena.tune.spec import Tune, describe_pruner, describe_sampler
from arena.tune.trials import (ERROR, RETRY_OF, Counts, Heartbeat, _tell, claim, counts, fail_stale, next_arm,
                               open_storage, open_studies)


# ---------------------------------------------------------------------------------------------
# the objective


def area(marks, values) -> float:
    """Trapezoid area under the curve over its budget span, divided by the span (the curve's average); the
    value itself for a single point. The same definition as ``arena report``'s tail-reward AUC."""
    if len(marks) < 2:
        return float(values[0])
    total = sum((values[i] + values[i + 1]) / 2 * (marks[i + 1] - marks[i]) for i in range(len(marks) - 1))
    return total / (marks[-1] - marks[0])


def objective_value(objective: str, curve: list[tuple[int, float, float]]) -> float:
    """The objective of a curve of (mark, tail_reward, tail_gain) so far: its running value."""
    if objective == "tail_gain":
        return curve[-1][2]
    return area([m for m, _, _ in curve], [r for _, r, _ in curve])


def curve_of(tracker, run_id: str) -> list[tuple[int, float, float]]:
    """(mark, tail_reward, tail_gain) at each evaluation point of a run, from MLflow."""
    rewards = dict(tracker.history(run_id, "eval/tail_reward"))
    gains = dict(tracker.history(run_id, "eval/tail_gain"))
    return [(mark, rewards[mark], gains[mark]) for mark in sorted(rewards) if mark in gains]


# ---------------------------------------------------------------------------------------------
# running trials


def _suggest(trial, option: str, kind: str, values: tuple):
    if kind == "choice":
        return trial.suggest_categorical(option, list(values))
    if kind == "int_uniform":
        return trial.suggest_int(option, values[0], values[1])
    return trial.suggest_float(option, float(values[0]), float(values[1]), log=kind == "log_uniform")


def _share_start(shared: Path, folder: Path, run) -> None:
    """The run's starting evaluations that earlier trials computed, linked into this trial's folder, where the
    runner looks for them (``start_caches``): every trial starts from the same model."""
    for cache in start_caches(folder, run):
        if (shared / cache.name).exists() and not cache.exists():
            cache.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(shared / cache.name, cache)
            except OSError:
                shutil.copyfile(shared / cache.name, cache)


def _publish_start(shared: Path, folder: Path, run) -> None:
    """The run's starting evaluations, copied from this trial's folder for the trials after it."""
    for cache in start_caches(folder, run):
        if cache.exists() and not (shared / cache.name).exists():
            staging = shared / f"{cache.name}.{os.getpid()}.tmp"
            shutil.copyfile(cache, staging)
            os.replace(staging, shared / cache.name)


@dataclass
class TrialResult:
    arm: str
    number: int
    state: str  # finished | pruned | failed | dropped (taken for dead by another worker, and queued again)
    value: float | None = None
    params: dict = field(default_factory=dict)
    error: str = ""  # why it failed, or where it was pruned


def run_trial(tune: Tune, arm: str, study: optuna.Study, trial, tracker, parent_id: str, workdir: Path,
              device: str | None, position: int, progress: bool) -> TrialResult:
    """One trial: sample the options, run the arm over the tune's seeds (pruned at an evaluation point when the
    pruner says so), tell Optuna the mean objective."""
    root = int(trial.user_attrs.get(RETRY_OF, trial.number))
    params = {option: _suggest(trial, option, kind, values) for option, (kind, values) in tune.space[arm].items()}
    result = TrialResult(arm, trial.number, "failed", params=params)
    shared = Path(workdir) / "tune" / tune.name
    folder = shared / arm / f"trial{root}"
    extra = {"arena.tune": tune.name, "arena.trial": str(root)}
    heartbeat = Heartbeat(trial)
    span, reported = tune.settings.budget.amount, set()
    try:
        one = tune.study_for(arm, {**tune.base.arms[arm].options, **params})
        runs = one.runs()
        values = []
        for i, run in enumerate(runs):
            identity = identity_tags(run, extra)
            for previous in tracker.find_runs(identity):  # a retry without a checkpoint starts a new run
                if previous.status in ("RUNNING", "KILLED") and not checkpoint_file(folder, run).exists():
                    tracker.finish(previous.run_id, "FAILED")
            _share_start(shared, folder, run)
            curve: list[tuple[int, float, float]] = []
            last_seed = i == len(runs) - 1

            def on_evaluation(mark, metrics, i=i, run=run, identity=identity, curve=curve, last_seed=last_seed):
                if not curve and mark > 0:  # resumed: the points logged before the interruption
                    found = tracker.find_runs(identity)
                    curve += [p for p in curve_of(tracker, found[0].run_id) if p[0] < mark] if found else []
                curve.append((mark, metrics["tail_reward"], metrics["tail_gain"]))
                if mark == 0:  # the starting evaluation is every trial's: nothing to compare
                    return
                for end in range(2, len(curve) + 1):
                    step = int(i * span + curve[end - 1][0])
                    if step not in reported:
                        trial.report(objective_value(tune.objective, curve[:end]), step)
                        reported.add(step)
                final = last_seed and mark >= int(round(span))
                if not final and trial.should_prune():
                    raise Stop(f"at {mark:g} {run.budget_unit}" + (f" of seed {run.seed}" if len(runs) > 1 else ""))

            outcome = execute(run, one, tracker, parent_id, folder, device, position, False, progress,
                              on_evaluation, extra)
            _publish_start(shared, folder, run)
            trial.set_user_attr(f"arena.run_id.seed{run.seed}", outcome.run_id)
            values.append(objective_value(tune.objective, curve_of(tracker, outcome.run_id)))
        result.value, result.state = sum(values) / len(values), "finished"
        told = _tell(study, trial, result.value)
    except Stop as stop:
        result.state, result.error = "pruned", str(stop)
        told = _tell(study, trial, state=TrialState.PRUNED)
    except optuna.exceptions.UpdateFinishedTrialError:  # reporting to a trial another worker failed as stale
        told = False
    except RUN_FAILURES as error:
        result.error = f"{type(error).__name__}: {error}"
        try:
            trial.set_user_attr(ERROR, result.error[:1000])
            told = _tell(study, trial, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            told = False
    except BaseException:  # interrupted: the next invocation resumes it from its checkpoint
        if _tell(study, trial, state=TrialState.FAIL):
            study.enqueue_trial(params, user_attrs={RETRY_OF: root}, skip_if_exists=False)
        raise
    finally:
        heartbeat.stop()
    if not told:  # another worker took it for dead and queued a retry, which resumes from the checkpoints
        result.state, result.value = "dropped", None
        return result
    shutil.rmtree(folder, ignore_errors=True)
    return result


def describe(result: TrialResult, tune: Tune, done: Counts) -> str:
    value = f"{tune.objective} {result.value:+.4f}, " if result.value is not None else ""
    options = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.params.items())
    tail = f" {result.error}" if result.state == "pruned" else f": {result.error}" if result.error else ""
    return (f"{result.arm} trial {result.number} ({options}): {value}{result.state}{tail} "
            f"[{done.finished + done.pruned} of {tune.trials_per_arm} finished or pruned]")


def work(tune: Tune, storage_url: str, tracker, parent_id: str, workdir: Path, device: str | None, slot: int,
         progress: bool) -> list[TrialResult]:
    """A worker: trials of the arm with the fewest until every arm has its trials."""
    studies = open_studies(tune, open_storage(storage_url))
    results = []
    while (arm := next_arm(tune, studies)) is not None:
        trial = claim(tune, studies[arm])
        if trial is None:
            continue
        result = run_trial(tune, arm, studies[arm], trial, tracker, parent_id, workdir, device, slot, progress)
        results.append(result)
        print(describe(result, tune, counts(studies[arm])), flush=True)
    return results


def _trials_in_pool_worker(tune: Tune, storage_url: str, tracker, parent_id: str, workdir: str, placement,
                           progress: bool) -> list[TrialResult]:
    """A worker (``work``) in a ``worker_pool`` process, on the device of the slot the process holds."""
    slot = worker_slot()
    return work(tune, storage_url, tracker, parent_id, Path(workdir), placement.device(slot), slot, progress)


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
    for arm in tune.arms:
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
        entry = copy.deepcopy(tune.raw_arms[o.arm])
        if base.profile:  # the profile's settings replace options; an arm's at: block goes on top
            at = entry.setdefault("at", {})
            at[base.profile] = {**(at.get(base.profile) or {}), **o.best_params}
        else:
            entry["options"] = {**(entry.get("options") or {}), **o.best_params}
        arms[o.arm] = entry
    raw = read_yaml(base.source_path)[0]
    from arena.profiles import apply_profile

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
    from arena.tracking import Tracker, resolve_uri

    require_weights(tune.settings.model)
    tracker = Tracker(resolve_uri(tracking_uri, tune.tracking.uri), tune.tracking.experiment)
    storage_url = tune.storage_url(workdir)
    studies = open_studies(tune, open_storage(storage_url))
    for arm in tune.arms:
        for number in fail_stale(studies[arm]):
            print(f"{arm} trial {number}: its process is gone; retried with the same options", flush=True)
    print(f"arena tune {tune.name}: {len(tune.arms)} arms x {tune.trials_per_arm} trials, objective {tune.objective}, "
          f"evaluation {tune.settings.evaluation.split} split seed {tune.settings.evaluation.seed}, "
          f"seeds {list(tune.settings.seeds)}, sampler {describe_sampler(tune)}, pruner {describe_pruner(tune.pruner)}, "
          f"{placement.slots} at a time, storage {storage_url}, "
          f"tracking {tracker.uri} (experiment {tracker.experiment})", flush=True)
    if (tune.settings.evaluation.split, tune.settings.evaluation.seed) == (tune.base.evaluation.split,
                                                                           tune.base.evaluation.seed):
        print(f"warning: evaluation {tune.base.evaluation.split} split seed {tune.base.evaluation.seed} is the study's: "
              "the settings are selected on the prompts that report the results (the default is the train split, "
              "seed the study's + 1)", flush=True)
    tags = {"arena.study": tune.name, "arena.tune": tune.name, "arena.base_study": tune.base.name,
            "arena.objective": tune.objective, "arena.git_commit": git_commit(),
            "arena.profile": tune.base.profile or "none", "arena.optuna": optuna.__version__,
            "arena.sampler": repr(studies[tune.arms[0]].sampler), "arena.pruner": repr(tune.pruner),
            "arena.tune_seeds": ",".join(map(str, tune.settings.seeds))}
    with tracker.parent_run(tune.name, tags) as parent:
        tracker.log_text(parent.run_id, Path(tune.source_path).read_text(), "tune.yaml")
        started = time.time()
        trials = run_workers(tune, storage_url, tracker, parent.run_id, Path(workdir), placement, progress)
        result = write_outcome(tune, studies, trials, tracker, parent.run_id, Path(out))
        parent.failed = bool(result.gave_up)
    ran = {state: sum(t.state == state for t in trials) for state in ("finished", "pruned", "failed")}
    print(f"\n{len(trials)} trials in this invocation ({ran['finished']} finished, {ran['pruned']} pruned, "
          f"{ran['failed']} failed) in {time.time() - started:.0f} s\n")
    print(table(tune, result.arms))
    print(f"\nwrote {result.snippet_path}: paste its arms into {tune.base.source_path}, then arena run and "
          "arena report")
    return result


def run_workers(tune: Tune, storage_url: str, tracker, parent_id: str, workdir: Path, placement,
                progress: bool) -> list[TrialResult]:
    """The trials of this invocation: one worker (``work``) in this process when there is one slot, else one in
    each process of a pool."""
    if placement.slots == 1:
        return work(tune, storage_url, tracker, parent_id, workdir, placement.device(0), 0, progress)
    with worker_pool(placement.slots, placement.threads()) as pool:
        futures = [pool.submit(_trials_in_pool_worker, tune, storage_url, tracker, parent_id, str(workdir), placement,
                               progress) for _ in range(placement.slots)]
        return [result for future in futures for result in future.result()]


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
