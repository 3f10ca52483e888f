"""Places a study's runs: in this process, in parallel processes (one per GPU, or a bounded number
on CPU), or on a Ray cluster; or one run across the processes of a ``torchrun`` / ``accelerate launch``
(``arena.processes.join_process_group``); then reads the results back from MLflow and summarises them per arm.

Each worker process (``arena.processes.worker_pool``) opens its own tracker on the same store and runs
``arena.runner.execute``; a run that fails (``arena.runner.RUN_FAILURES``: a reward that raised, a non-finite
statistic) is reported and the others go on.
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from arena.processes import run_in_slots
from arena.runner import RUN_FAILURES, Outcome, execute


@dataclass(frozen=True)
class Placement:
    """Where runs go: ``devices`` (one run per device at a time) or ``jobs`` parallel CPU processes; or with
    ``backend="ray"``, one Ray task per run on the cluster at ``address`` (None: a Ray instance started here),
    each holding ``cpus`` CPUs and one GPU when runs use GPUs."""

    jobs: int = 1
    devices: tuple[str, ...] = ()
    backend: str = "local"  # local | ray
    address: str | None = None
    cpus: int = 1
    processes: int = 1  # > 1: one run across the processes of a launch (``join_process_group``), this one on devices[0]
    cores_per_run: int = 0  # torch threads of a CPU run; 0: the cores split between the slots

    @property
    def slots(self) -> int:
        return len(self.devices) or self.jobs

    def device(self, slot: int) -> str | None:
        return self.devices[slot] if self.devices else None

    def threads(self) -> int:
        if self.backend == "ray":
            return self.cpus
        return self.cores_per_run or max(1, (os.cpu_count() or 1) // self.slots)

    @classmethod
    def auto(cls, jobs: int | None, devices: str | None, runs: int, **ray) -> "Placement":
        """Given devices, one run on each; else every visible GPU; else ``jobs`` (default: one per core)."""
        import torch

        if ray.get("backend") == "ray":
            return cls(devices=tuple(devices.split(",")) if devices else (), **ray)
        if devices:
            return cls(devices=tuple(devices.split(",")))
        if jobs is None and torch.cuda.is_available():
            return cls(devices=tuple(f"cuda:{i}" for i in range(min(torch.cuda.device_count(), runs))))
        # threads from the jobs asked for, not from the runs left: a run's numerics depend on its thread count, so
        # the last run of a resumed study must get the threads its siblings got (never more slots than runs)
        asked = max(1, jobs or os.cpu_count() or 1)
        return cls(jobs=max(1, min(asked, runs)), cores_per_run=max(1, (os.cpu_count() or 1) // asked))

    def gpus(self) -> int:
        """GPUs per Ray task: one when runs use a GPU (a cuda device named in ``devices``, else one seen here)."""
        if self.devices:
            return int(any(d.startswith("cuda") for d in self.devices))
        import torch

        return int(torch.cuda.is_available())


def _guarded(run, device, position, study, tracker, parent_id, workdir, force, progress) -> Outcome:
    try:
        return execute(run, study, tracker, parent_id, workdir, device, position, force, progress)
    except RUN_FAILURES as error:
        return Outcome(run.arm, run.seed, "", "failed", f"{type(error).__name__}: {error}")


def run_all(study, runs, tracker, parent_id: str, workdir: Path, placement: Placement, force: bool = False,
            progress: bool = True) -> list[Outcome]:
    """Every run of ``runs``; in this process when there is one slot, else in a pool of processes."""
    if placement.slots == 1 and not placement.devices:  # a CPU run here gets the threads a worker would have
        import torch

        torch.set_num_threads(placement.threads())
    return run_in_slots(placement, functools.partial(_guarded, study=study, tracker=tracker, parent_id=parent_id,
                                                     workdir=Path(workdir), force=force, progress=progress), runs)


def _ray_task(run, study, uri: str, experiment: str, parent_id: str, workdir: str, device: str, threads: int,
              force: bool) -> Outcome:
    """One run in a Ray worker: its own tracker on the shared store, as many torch threads as the task's CPUs."""
    import torch

    from arena.tracking import Tracker

    torch.set_num_threads(threads)
    return _guarded(run, device, 0, study, Tracker(uri, experiment), parent_id, Path(workdir), force, False)


def run_all_ray(study, runs, tracker, parent_id: str, workdir: Path, placement: Placement,
                force: bool = False) -> list[Outcome]:
    """Every run of ``runs`` as one Ray task; a line per run as it ends. A run whose worker or machine died
    (out of memory, a lost node) comes back failed, as a run that raised does; the others go on."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=placement.address)
    machines = sum(node["Alive"] for node in ray.nodes())
    if machines > 1 and (tracker.uri.startswith(("sqlite:", "file:")) or "://" not in tracker.uri):
        print(f"warning: {tracker.uri} is a file, but the Ray cluster has {machines} machines: runs placed on the "
              "others write to their own copy; use --tracking-uri http://... (docs/scaling.md)", flush=True)
    gpus = placement.gpus()
    task = ray.remote(num_cpus=placement.cpus, num_gpus=gpus)(_ray_task)
    # absolute: workers may run in another directory (on other machines, the same path: a shared filesystem)
    refs = [task.remote(run, study, tracker.uri, tracker.experiment, parent_id, str(Path(workdir).absolute()),
                        "cuda" if gpus else "cpu", placement.threads(), force) for run in runs]
    outcomes, waiting = {}, list(refs)
    try:
        while waiting:
            (ready,), waiting = ray.wait(waiting)
            index = refs.index(ready)
            run = runs[index]
            try:
                outcomes[index] = ray.get(ready)
            except ray.exceptions.RayTaskError:
                raise  # an unexpected error in arena: stop, as the local backend does
            except ray.exceptions.RayError as error:
                outcomes[index] = Outcome(run.arm, run.seed, "", "failed",
                                          f"{type(error).__name__}: {str(error).strip().splitlines()[0]}")
            print(f"{run.arm} seed {run.seed}: {outcomes[index].status} ({len(outcomes)} of {len(runs)})",
                  flush=True)
    except BaseException:
        for ref in waiting:
            ray.cancel(ref)
        raise
    finally:
        if started_here:
            ray.shutdown()
    return [outcomes[index] for index in range(len(runs))]


# ---------------------------------------------------------------------------------------------
# the printed summary, read back from MLflow (so a study run partly earlier, elsewhere, counts too)

def summary_tables(study, tracker, width: int | None = None) -> tuple[str, str]:
    """The study's table as ``arena report`` computes it (``arena.report.comparison.rows``): per arm and control,
    the tail gain with its interval over seeds and evaluation draws, the gain over sharpening, the hard gain,
    the verdict against the reference, then the arms at matched decoding; read back from MLflow, so runs finished
    earlier or elsewhere count too. Twice: as a table, and laid out for a terminal ``width`` columns wide."""
    from arena.report import comparison, tables
    from arena.report.records import ReportError, read_results

    try:
        results = read_results(tracker, study)
    except ReportError as error:
        return (f"no summary: {error}",) * 2
    off = ("" if study.controls else "\ncontrols: off (the study sets controls: []), so no row shows what the "
           "untrained start model (frozen) or its best temperature (sharpen) scores")
    table = comparison.rows(results)
    parts = table, comparison.setup(results), comparison.matched_rows(results, table)
    return tables.text(*parts) + off, tables.text(*parts, width=width) + off


def terminal_width() -> int | None:
    """The columns of the terminal the summary is printed to; None for a file or a pipe (nothing wraps there)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


# ---------------------------------------------------------------------------------------------
# what the MLflow UI shows first (arena ui): the arms' curves on the parent run, the question and the summary

ARM_CURVES = ("eval/tail_reward", "eval/tail_gain", "eval/mean_reward")


def arm_curve_rows(study, tracker) -> list[tuple[str, float, int]]:
    """(key, value, mark) rows of every arm's aggregate curves over its finished seeds (the report's rule, all
    runs of the study), at the study's evaluation marks: ``arms/<arm>/<name>`` is the mean over seeds of
    ``eval/<name>``, and ``..._low`` / ``..._high`` the bounds of its 95% interval (``t_interval``, the
    report's definition for curves; left out with one seed)."""
    from arena.report.records import finished_runs, marks_of
    from arena.report.stats import t_interval

    runs = study.runs()
    found = finished_runs(tracker, runs).runs
    rows = []
    for arm in study.arms:
        run_ids = [found[(run.arm, run.seed)].run_id for run in runs if run.arm == arm and (run.arm, run.seed) in found]
        for key in ARM_CURVES:
            histories = [dict(tracker.history(run_id, key)) for run_id in run_ids]
            name = f"arms/{arm}/{key.removeprefix('eval/')}"
            for mark in marks_of(study):
                values = [history[mark] for history in histories if mark in history]
                if not values:
                    continue
                estimate = t_interval(values)
                rows.append((name, estimate.value, mark))
                if estimate.has_interval:
                    rows += [(f"{name}_low", estimate.low, mark), (f"{name}_high", estimate.high, mark)]
    return rows


def study_description(study, table: str) -> str:
    """The experiment's description (Markdown): the study file's leading comment lines (its question), the
    commands, and the latest summary table."""
    lines = []
    if study.source_path and Path(study.source_path).is_file():
        for line in Path(study.source_path).read_text().splitlines():
            if not line.startswith("#"):
                break
            lines.append(line.removeprefix("#").removeprefix(" "))
    source = study.source_path or f"{study.name}.yaml"
    return "\n".join([*lines, "", f"Run: `arena run {source}`; report: `arena report {source}`.", "",
                      f"Latest summary ({time.strftime('%Y-%m-%d %H:%M:%S')}):", "", "```text", table, "```"])


def show_comparison(study, tracker, parent_id: str, table: str) -> None:
    """Log the arms' aggregate curves to the parent run and set the experiment's first view: its description,
    the child runs grouped by arm with the tail reward first, then the parent's per-arm means and intervals."""
    tracker.log_rows(parent_id, arm_curve_rows(study, tracker))
    alpha = f"{study.evaluation.primary_alpha:g}"
    arms = list(study.arms)
    tracker.set_first_view(study_description(study, table), "arena.arm", {
        f"tail reward (α={alpha}) by arm: child runs grouped by arena.arm": [["eval/tail_reward"], ["eval/tail_gain"]],
        "each arm's mean and 95% interval over seeds (parent run)":
            [[f"arms/{arm}/tail_reward" for arm in arms],
             *([f"arms/{arm}/tail_reward", f"arms/{arm}/tail_reward_low", f"arms/{arm}/tail_reward_high"]
               for arm in arms)],
    })


# ---------------------------------------------------------------------------------------------
# the plan (arena run --dry-run) and a whole study


def select(runs, only: dict[str, str]) -> list:
    """The runs matching ``--only arm=NAME,seed=N`` (either key may be left out)."""
    return [r for r in runs if only.get("arm", r.arm) == r.arm and int(only.get("seed", r.seed)) == r.seed]


def samples_per_step(run) -> int | None:
    """Completions one step of the run's method generates, when its config says (GRPO family, ES)."""
    return run.config.samples_per_step(run.train.prompts_per_step)


def describe_runs(study, runs) -> str:
    """What ``arena run`` would do, without loading a model: runs, budget, evaluation schedule, expected samples."""
    from arena.budget import evaluation_points
    from arena.report.tables import arm_width

    budget, evaluation = study.budget, study.evaluation
    marks = ", ".join(f"{m:g}" for m in evaluation_points(budget.amount, evaluation.points))
    eval_samples, width = evaluation.prompts * evaluation.samples, arm_width(run.arm for run in runs)
    extra = evaluation.of_draw(1)
    later = "draw 1" if evaluation.draws == 2 else f"draws 1..{evaluation.draws - 1}"
    lines = [f"study {study.name}: {len(runs)} runs, budget {budget.amount:g} {budget.unit} per run",
             f"evaluation at {budget.unit} = {marks}: {evaluation.prompts} held-out prompts x {evaluation.samples} "
             f"samples ({eval_samples} completions, at most {eval_samples * evaluation.max_new_tokens} tokens, "
             f"per point; the first point is shared by every run), tail at alpha {evaluation.primary_alpha:g}",
             *([f"evaluation {later}: {extra.prompts} other prompts x {extra.samples} samples each "
                f"({extra.prompts * extra.samples} completions), at the start and the end only"]
               if evaluation.draws > 1 else []),
             *([matched_cost(study)] if study.matched_decoding else []),
             f"{'arm':<{width}} {'seed':>4}  {'config':<12}  {'method':<12} {'samples/step':>12} {'steps':>6} "
             f"{'train samples':>13}  options"]
    for run in runs:
        per_step = samples_per_step(run)
        steps = math.ceil(budget.amount / per_step) if per_step and budget.unit == "samples" else None
        lines.append(f"{run.arm:<{width}} {run.seed:>4}  {run.config_hash:<12}  {run.method:<12} {per_step or '?':>12} "
                     f"{steps or '?':>6} {steps * per_step if steps else '?':>13}  {run.options}")
    return "\n".join(lines)


def matched_cost(study) -> str:
    """What matched decoding adds to each trained run, in completions, against the run's own evaluation."""
    from arena.evaluate import SHARPEN_GRID

    evaluation = study.evaluation
    draw0 = evaluation.prompts * evaluation.samples
    others = (evaluation.draws - 1) * evaluation.of_draw(1).prompts * evaluation.of_draw(1).samples
    grid = len(SHARPEN_GRID) * draw0
    own = (evaluation.points - 1) * draw0 + others  # the later points and the final draws; the start is shared
    return (f"matched decoding (the sharpen control is on): each trained run ends with {len(SHARPEN_GRID)} "
            f"temperatures x {evaluation.prompts} training prompts x {evaluation.samples} samples, then every draw "
            f"at the temperature chosen: {grid + draw0 + others} more completions, {(grid + draw0 + others) / own:.1f}x "
            f"the run's own {own} evaluation completions")


def invocation(study, tracking_uri: str | None, tags: dict | None = None):
    """What an invocation of ``arena run`` or ``arena tune`` opens first, once ``study``'s model is known to be
    there: the tracker of the study's store and the invocation's parent run (to enter), tagged with the study,
    the commit, the profile and ``tags``."""
    from arena.runner import git_commit, require_weights
    from arena.tracking import Tracker, resolve_uri

    require_weights(study.model)
    tracker = Tracker(resolve_uri(tracking_uri, study.tracking.uri), study.tracking.experiment or study.name)
    return tracker, tracker.parent_run(study.name, {"arena.study": study.name, "arena.git_commit": git_commit(),
                                                    "arena.profile": study.profile or "none", **(tags or {})})


def run_study(study, runs, placement: Placement, tracking_uri: str | None, workdir: Path, force: bool = False,
              progress: bool = True) -> list[Outcome]:
    """Every run of ``runs`` under one parent MLflow run, then the summary per arm; returns the outcomes."""
    from arena.runner import require_weights
    from arena.tracking import NullTracker
    from methods.collectives import world

    if world()[0] > 0:  # another rank of one run across processes: its share of the work; rank 0 logs and prints
        require_weights(study.model)
        return [_guarded(runs[0], placement.device(0), 0, study, NullTracker(), None, Path(workdir), force, False)]
    tracker, parent_run = invocation(study, tracking_uri)
    if placement.processes > 1:
        where = f"one run across {placement.processes} processes, rank 0 on {placement.device(0)}"
    elif placement.backend == "ray":
        where = (f"Ray at {placement.address or 'a local instance'}, {placement.cpus} CPU and "
                 f"{placement.gpus()} GPU per run")
    else:
        where = f"device {','.join(placement.devices) or default_device()}, {placement.slots} at a time"
    print(f"arena run {study.name}: model {study.model}, profile {study.profile or 'none (embedded tiny model)'}, "
          f"{where}, tracking {tracker.uri} (experiment {tracker.experiment})", flush=True)
    started = time.time()
    with parent_run as parent:
        parent_id = parent.run_id
        if placement.backend == "ray":
            outcomes = run_all_ray(study, runs, tracker, parent_id, Path(workdir), placement, force)
        else:
            outcomes = run_all(study, runs, tracker, parent_id, Path(workdir), placement, force, progress)
        outcomes += run_controls(study, tracker, parent_id, Path(workdir), placement, force)
        parent.failed = any(o.status == "failed" for o in outcomes)
    done = {status: sum(o.status == status for o in outcomes) for status in ("finished", "skipped", "failed")}
    runs_word = "run" if done["finished"] == 1 else "runs"
    print(f"\n{done['finished']} {runs_word} finished, {done['skipped']} already finished (skipped), {done['failed']} "
          f"failed, in {time.time() - started:.0f} s\n")
    table, printed = summary_tables(study, tracker, terminal_width())
    print(printed)
    show_comparison(study, tracker, parent_id, table)
    print(f"\nlook further: arena ui {study.source_path}    arena report {study.source_path}")
    return outcomes


def run_controls(study, tracker, parent_id: str, workdir: Path, placement: Placement, force: bool) -> list[Outcome]:
    """The study's controls (``arena.controls``): one evaluation each, in this process, after the arms (whose
    starting evaluation they share through its cache); a control that fails is reported like a failed run."""
    from arena.controls import evaluate_control

    outcomes = []
    for control in study.control_specs():
        try:
            outcomes.append(evaluate_control(control, tracker, parent_id, workdir, placement.device(0), force))
        except Exception as error:
            print(f"control {control.arm} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            outcomes.append(Outcome(control.arm, 0, "", "failed", f"{type(error).__name__}: {error}"))
    return outcomes


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
