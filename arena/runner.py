"""One (arm, seed) run of a study, top to bottom: resume or start, evaluate, step, checkpoint, log.

    start     find the run in MLflow by (study, arm, seed, config hash): finished -> skip; unfinished
              with a checkpoint -> resume from it; otherwise a new child run
    evaluate  at budget 0 (the starting evaluation and the hard subset are the same for every run of a
              study, so they are computed once and cached), then after the first step that reaches
              each further evaluation point
    step      the method consumes prompts drawn from the train split by (seed, step), shared by arms
    checkpoint at every evaluation point: the method's state, the meter, every metric row logged so far

Methods never log: the runner logs their statistics under ``train/``, the evaluation under ``eval/``,
what was consumed under ``budget/``. Metric rows are buffered between evaluation points and written
after the checkpoint, and a resumed run first writes whatever of its checkpoint's rows MLflow lacks,
so a run killed at any moment and rerun has every point exactly once.

Across processes (``torchrun`` / ``accelerate launch``, one run): every rank trains its share and decodes its share
of each evaluation, gathered onto every rank (``Evaluator.decode``); rank 0 alone decides skip/resume/new (and tells
the others), logs, and writes the checkpoint, except under FSDP, where every rank writes its own shards (``save``).
The other ranks get a tracker that does nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from arena.budget import Consumption, Meter, evaluation_points, mark_of, marks
from arena.config import digest
from arena.evaluate import DRAW_METRICS, Evaluation, Evaluator, RewardError, checked_reward, choose_temperature
from arena.memory import deterministic_kernels, out_of_memory
from arena.progress import Progress, announce
from arena.rng import RunKey, seed_of
from arena.shards import gather
from arena.tracking import draw_artifact, evaluation_artifact, matched_artifact, rollout_artifact
from methods import fsdp, method_class
from methods.collectives import all_reduce_sums, world
from methods.diagnostics import merged_records
from rewards import load_task

SHARDS = "shards"  # a sharded (FSDP) checkpoint's method state: the folder shards-<point> beside checkpoint.pt
# what fails one run (a reward that raised, a non-finite statistic, an invalid option: ConfigError is a ValueError)
# and not the invocation, whose other runs (or trials) go on; any other error is arena's and stops the invocation
RUN_FAILURES = (RewardError, FloatingPointError, ValueError, RuntimeError)


@dataclass
class Outcome:
    arm: str
    seed: int
    run_id: str
    status: str  # finished | skipped | failed
    error: str = ""


@dataclass
class Checkpoint:
    """What a resumed run needs besides the method: where it is, and every metric row it has logged."""

    step: int = 0
    point: int = 0  # the next evaluation point
    meter: Meter = field(default_factory=Meter)
    rows: list = field(default_factory=list)  # (key, value, budget step)


def run_directory(workdir: Path, run) -> Path:
    return Path(workdir) / run.study / run.arm / f"seed{run.seed}-{run.config_hash}"


def checkpoint_file(workdir: Path, run) -> Path:
    """Where the run's checkpoint is (``save``): it exists while the run can be resumed."""
    return run_directory(workdir, run) / "checkpoint.pt"


def identity_tags(run, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The tags that find the run in MLflow again (``decide``): its study, arm, seed and config hash, and the
    caller's ``extra`` ones (a tuner's ``arena.tune``, ``arena.trial``)."""
    return {"arena.study": run.study, "arena.arm": run.arm, "arena.seed": str(run.seed),
            "arena.config_hash": run.config_hash, **(extra or {})}


def shared(value):
    """Rank 0's ``value``, on every rank of a run across processes (on one process, ``value``)."""
    if world()[1] == 1:
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def save(path: Path, method, checkpoint: Checkpoint, sharded: bool) -> None:
    """Write atomically: a kill during the write leaves the previous checkpoint intact.

    A replicated method (one process, replicas, ES) has the same state on every rank: rank 0 writes it into
    ``checkpoint.pt``. A sharded one (FSDP) has a part on each: every rank writes its own into a new folder
    with torch.distributed.checkpoint (which loads onto any world size), then rank 0 commits the checkpoint by
    writing ``checkpoint.pt`` naming that folder, and removes the earlier ones. Every rank waits for the commit.
    """
    state = {"runner": dataclasses.asdict(checkpoint)}
    if sharded:
        import torch.distributed.checkpoint as dcp

        shards = path.with_name(f"{SHARDS}-{checkpoint.point:04d}")  # points only grow: never the committed one
        dcp.save(method.state_dict(), checkpoint_id=shards)
        state["shards"] = shards.name
    if world()[0] == 0:
        if not sharded:
            state["method"] = method.state_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".tmp")
        torch.save(state, staging)
        os.replace(staging, path)
        remove_shards(path.parent, keep=state.get("shards"))
    if world()[1] > 1:
        torch.distributed.barrier()


class ResumeError(RuntimeError):
    """A run's checkpoint cannot be resumed from (unreadable, or not this run's); the run fails, the others go on."""


def load(path: Path, method, device) -> Checkpoint:
    """The checkpoint ``save`` wrote, onto ``method`` (every rank reads it: the working directory is shared).

    ``weights_only``: the file holds tensors, dicts, lists and numbers only, so reading it runs no pickled code.
    """
    state = torch.load(path, map_location=device, weights_only=True)
    if "shards" in state:
        import torch.distributed.checkpoint as dcp

        state["method"] = method.state_dict()  # the layout to fill: this rank's shards
        dcp.load(state["method"], checkpoint_id=path.with_name(state["shards"]))
    method.load_state_dict(state["method"])
    runner = state["runner"]
    meter = Meter(used=Consumption(**runner["meter"]["used"]), seconds=runner["meter"]["seconds"])
    return Checkpoint(runner["step"], runner["point"], meter, [tuple(r) for r in runner["rows"]])


def cause(error: BaseException) -> str:
    """The first sentence of why loading failed: torch's weights-only refusal spans a page, its reason follows
    ``WeightsUnpickler error:``."""
    text = str(error).strip()
    reason = re.search(r"WeightsUnpickler error:\s*(.+)", text)
    return (reason.group(1) if reason else text.splitlines()[0] if text else "").split(". ")[0]


def discard_checkpoint(path: Path) -> None:
    """Rank 0 removes an older run's checkpoint (``--force``, or a run of another tracking store) before a new
    run starts here, so that the new run, killed before its first checkpoint, never resumes from it."""
    if world()[0] == 0:
        path.unlink(missing_ok=True)
        remove_shards(path.parent)


def remove_shards(directory: Path, keep: str | None = None) -> None:
    """Remove the sharded checkpoints' folders in ``directory``, all but the one named ``keep``."""
    for old in directory.glob(f"{SHARDS}-*"):
        if old.name != keep:
            shutil.rmtree(old)


def decide(tracker, tags: dict[str, str], checkpoint_path: Path, force: bool) -> tuple[str, str]:
    """("skip", its id) for a finished run, ("resume", its id) for an unfinished one with a checkpoint, else
    ("new", "")."""
    previous = [] if force else tracker.find_runs(tags)
    if previous and previous[0].status == "FINISHED":
        return "skip", previous[0].run_id
    if previous and checkpoint_path.exists():
        return "resume", previous[0].run_id
    return "new", ""


def decode(evaluator: Evaluator, policy) -> Evaluation:
    """An evaluation point's samples. Every rank of a run across processes decodes its share of them and receives
    all (``Evaluator.decode``); under FSDP each first gathers the model (a collective); rank 0 logs."""
    with fsdp.gathered(policy.model):
        return evaluator.decode(policy)


def start_cache(workdir: Path, run, draw: int = 0) -> Path:
    """Where the starting evaluation of a draw is cached: shared by every run (and control) of the study that
    starts from the same model, task and evaluation."""
    return Path(workdir) / run.study / (f"start-{start_key(run)}" + (f"-draw{draw}" if draw else "") + ".npz")


def start_caches(workdir: Path, run) -> list[Path]:
    """Every starting evaluation the run reads (``start_cache``): one per evaluation draw."""
    return [start_cache(workdir, run, draw) for draw in range(run.evaluation.draws)]


@contextlib.contextmanager
def decoding_once(cache: Path):
    """Held by rank 0 while it looks for, and if missing decodes, a shared start evaluation: runs of a study that
    start at once (``--jobs N``) queue on the cache's lock file, so one decodes it and the others read it."""
    if world()[0] != 0:
        yield
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_name(cache.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        yield


def starting_evaluation(evaluator: Evaluator, policy, cache: Path, say=None) -> tuple[Evaluation, np.ndarray]:
    """The evaluation at budget 0 and the hard subset, shared by every run that starts from this model; ``say``,
    if given, is told when it has to be decoded (minutes at scale, before any bar moves)."""
    with decoding_once(cache):
        return _starting_evaluation(evaluator, policy, cache, say)


def _starting_evaluation(evaluator: Evaluator, policy, cache: Path, say) -> tuple[Evaluation, np.ndarray]:
    if shared(cache.exists()):  # rank 0 looks, so that all ranks decode or none does
        saved = np.load(cache, allow_pickle=False)
        completions = json.loads(str(saved["completions"]))
        return Evaluation(saved["rewards"], completions), saved["hard"]
    if say is not None:
        spec = evaluator.spec
        say(f"decoding the start model on evaluation draw {evaluator.draw} ({spec.prompts} prompts x {spec.samples} "
            f"samples, and again to pick the hard prompts), once for every run of the study")
    with fsdp.gathered(policy.model):  # every rank decodes its share, as at each evaluation point (``decode``)
        start, hard = evaluator.decode(policy), evaluator.hard_subset(policy)
    if world()[0] == 0:  # its folder made by ``decoding_once``
        staging = cache.with_name(cache.name + f".{os.getpid()}.tmp.npz")
        np.savez(staging, rewards=start.rewards, hard=hard, completions=json.dumps(start.completions))
        os.replace(staging, cache)
    return start, hard


def draw_starts(evaluators: list[Evaluator], policy, workdir: Path, run, say=None) -> list[tuple[Evaluation, np.ndarray]]:
    """The start and hard subset of evaluation draws 1..D-1, decoded (or read from the study's cache) while
    ``policy`` is still the start policy: at the beginning of a run, before any step or resume. A start
    computed at a run's end would be that run's trained policy, cached for every other run of the study."""
    return [starting_evaluation(evaluator, policy, start_cache(workdir, run, evaluator.draw), say)
            for evaluator in evaluators]


def other_draws(evaluators: list[Evaluator], starts: list[tuple[Evaluation, np.ndarray]], policy, mark: int, tracker,
                run_id: str, temperature: float | None = None, frozen: bool = False) -> list[tuple[str, float, int]]:
    """Evaluation draws 1..D-1 at the end of a run: the policy now (decoded at ``temperature`` if given; the start
    itself when ``frozen``) against each draw's start (``draw_starts``), logged as ``evaluations/draws/NN.npz``
    (start, end, hard); the rows of their gains."""
    rows = []
    for evaluator, (start, hard) in zip(evaluators, starts, strict=True):
        if frozen:  # the same samples by construction; decoding again would add only thread-count numerics
            now = start
        else:
            with fsdp.gathered(policy.model):
                now = evaluator.decode(policy, temperature=temperature)
        metrics = evaluator.metrics(now, start, hard)
        rows += [(f"draws/{evaluator.draw}/{key}", metrics[key], mark) for key in DRAW_METRICS]
        tracker.log_npz(run_id, {"start": start.rewards, "end": now.rewards, "hard": hard},
                        draw_artifact(evaluator.draw))
    return rows


def temperature_rows(prefix: str, tau: float, tails: dict[float, float], mark: int) -> list[tuple[str, float, int]]:
    """The chosen τ and the training tail at every τ of the grid, as metric rows under ``prefix``."""
    return [(f"{prefix}/temperature", tau, mark),
            *((f"{prefix}/train_tail_t{value:g}", tail, mark) for value, tail in tails.items())]


def matched_decoding(policy, task, spec, source: str | None, evaluators: list[Evaluator], starts: list, mark: int,
                     tracker, run_id: str) -> list[tuple[str, float, int]]:
    """A trained run's end at its own best temperature (the sharpening rule, ``arena.evaluate.choose_temperature``): every
    evaluation draw (``evaluators``, draw 0 first, with ``starts``: each draw's start and hard subset at the
    study's temperature) decoded at τ x the study's temperature. Logs each draw's start, end and hard subset as
    ``matched_artifact(draw)``; returns the rows: ``matched/temperature`` (τ), the training tails, every
    evaluation metric of draw 0 as ``matched/eval/<key>`` and draws 1.. as ``matched/draws/<d>/<key>``."""
    tau, tails = choose_temperature(task, spec, policy, source)
    rows = temperature_rows("matched", tau, tails, mark)
    for evaluator, (start, hard) in zip(evaluators, starts, strict=True):
        now = evaluator.decode(policy, temperature=tau * spec.temperature)
        metrics = evaluator.metrics(now, start, hard)
        if evaluator.draw == 0:
            rows += [(f"matched/eval/{key}", value, mark) for key, value in metrics.items()]
        else:
            rows += [(f"matched/draws/{evaluator.draw}/{key}", metrics[key], mark) for key in DRAW_METRICS]
        tracker.log_npz(run_id, {"start": start.rewards, "end": now.rewards, "hard": hard},
                        matched_artifact(evaluator.draw))
    return rows


def initial_weights(model) -> dict[str, torch.Tensor]:
    """The weights before a method wraps the model, on the CPU, for ``weight_drift``.

    A tensor whose every value bf16 holds exactly (a bf16 checkpoint loaded in fp32, as on the CPU) is kept in
    bf16: half the host memory (2.5 GiB at one 7B-width layer), and losslessly, since widening it back to fp32
    gives the same bits; any other tensor is kept as it is. A copy on disk would save the rest but write the
    model once per run, and streaming from the checkpoint would tie the drift to how a model was loaded."""
    return {name: _start_copy(p.detach()) for name, p in model.named_parameters()}


def _start_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of ``tensor``, in bf16 if that loses nothing (the low 16 bits of every fp32 value are zero);
    the test runs in slices, so that no temporary is as large as the tensor."""
    bits = tensor.reshape(-1).view(torch.int32) if tensor.dtype == torch.float32 else None
    exact = bits is not None and not any(bool((part & 0xFFFF).any()) for part in bits.split(1 << 22))
    return tensor.to("cpu", torch.bfloat16 if exact else tensor.dtype, copy=True)


def own_shards(model, initial: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``initial`` cut to this rank's shard of each parameter of a sharded (FSDP) model; as is otherwise."""
    if not fsdp.is_sharded(model):
        return initial
    from torch.distributed.tensor import distribute_tensor

    return {name: distribute_tensor(initial[name], p.device_mesh, p.placements, src_data_rank=None).to_local().cpu()
            for name, p in model.named_parameters() if name in initial}


def weight_drift(model, initial: dict[str, torch.Tensor]) -> float:
    """||W - W0|| / ||W0|| over the network's effective weights (LoRA deltas merged), in fp32.

    ``initial`` holds the weights before the method wrapped the model (plain parameter names); under FSDP,
    this rank's shards of them (``own_shards``): each rank sums its shards and the sums are added up.
    """
    moved = total = 0.0
    for module in model.modules():  # LoRA: the adapters' product is the weights' change
        if hasattr(module, "get_delta_weight"):
            for adapter in module.active_adapters:
                moved += float(module.get_delta_weight(adapter).float().square().sum())
    for name, param in model.named_parameters():
        key = name.replace("base_model.model.", "").replace(".base_layer", "")
        if key in initial:
            # one fp32 buffer of the tensor, worked in place: W0 - W (the same square as W - W0: IEEE subtraction
            # rounds symmetrically), then W0 again. ``W - W0`` with a bf16 W0 would take two: on the CPU, torch
            # widens a mixed-dtype operand into a temporary before the result's own
            wide = initial[key].to(torch.float32, copy=True)
            moved += float(wide.sub_(fsdp.local(param.detach()).float().cpu()).square_().sum())
            total += float(wide.copy_(initial[key]).square_().sum())
    if fsdp.is_sharded(model):
        sums = all_reduce_sums({"moved": moved, "total": total})
        moved, total = sums["moved"], sums["total"]
    return math.sqrt(moved / total) if total else 0.0


def train_prompts(task, policy, run, step: int) -> tuple[list[dict], list[list[int]], list[str]]:
    """The step's training prompts: drawn by (seed, step), so every arm of a seed sees the same ones."""
    examples = task.examples("train", n=run.train.prompts_per_step, seed=seed_of(run.seed, RunKey.TRAIN_PROMPTS, step),
                             source=run.task.source)
    texts = [task.prompt(e, policy.tokenizer) for e in examples]
    return examples, [policy.encode(t) for t in texts], texts


def resumed_from(state: Checkpoint, steps: list[int]) -> str:
    """Where a rerun resumes a run that stopped now: its last checkpoint (``save``), at the last evaluation mark."""
    return f"its checkpoint at evaluation mark {steps[state.point - 1]}" if state.point else "its start"


class Stop(Exception):
    """Raised by an ``on_evaluation`` callback to end a run early (a tuner pruning a trial): the run is
    marked KILLED, and what it logged stays."""


def execute(run, study, tracker, parent_id: str | None, workdir: Path, device: str | None = None,
            position: int = 0, force: bool = False, progress: bool = True, on_evaluation=None,
            tags: dict[str, str] | None = None, caches: Path | None = None) -> Outcome:
    """Run (or resume, or skip) one (arm, seed) of ``study``; everything it measures goes to ``tracker``.

    ``on_evaluation(mark, metrics)``, if given, is called after each evaluation point is logged (the
    metrics without their ``eval/`` prefix); it may raise ``Stop``. ``tags`` (a tuner's ``arena.tune``,
    ``arena.trial``) go on the run and, with the run's identity, find it again. ``caches``: where the starting
    evaluations are shared (``start_cache``; default ``workdir``, a tuner's: across its trials' folders). In a
    run across processes every rank calls it, the ranks other than 0 with a ``NullTracker`` and no progress bar.
    """
    from arena.model import load_policy

    tags = identity_tags(run, tags)
    checkpoint_path = checkpoint_file(workdir, run)
    action, run_id = shared(decide(tracker, tags, checkpoint_path, force))  # rank 0 asks MLflow, for every rank
    if action == "skip":
        return Outcome(run.arm, run.seed, run_id, "skipped")

    deterministic_kernels(bool(run.train.deterministic))  # or not: runs share a process
    policy = load_policy(run.model, device=device)
    task = load_task(run.task.name, run.task.levels)
    initial = initial_weights(policy.model)
    method = method_class(run.method)(policy, run.config, run.seed)
    initial = own_shards(policy.model, initial)  # FSDP: each rank compares its own shards
    sharded = fsdp.is_sharded(policy.model)
    evaluator = Evaluator(task, run.evaluation, policy.tokenizer, run.task.source)
    say = functools.partial(announce, f"{run.arm} seed {run.seed}", enabled=progress)
    with out_of_memory("the starting evaluation", "its start", "evaluation"):
        caches = workdir if caches is None else caches
        start, hard = starting_evaluation(evaluator, policy, start_cache(caches, run), say)
        extra = Evaluator.final_draws(task, run.evaluation, policy.tokenizer, run.task.source)
        extra_starts = draw_starts(extra, policy, caches, run, say)  # before any step or resume loads weights

    if action == "resume":
        try:
            state = load(checkpoint_path, method, policy.device)
        except Exception as error:  # a corrupt or foreign file: this run fails, saying how to start it over
            tracker.finish(run_id, "FAILED")
            raise ResumeError(f"cannot resume from {checkpoint_path} ({type(error).__name__}: {cause(error)}); delete "
                              f"that file to start this run over, or rerun with --force --only arm={run.arm},"
                              f"seed={run.seed}") from None
        tracker.reopen(run_id)
        tracker.log_missing(run_id, state.rows)
    else:
        discard_checkpoint(checkpoint_path)
        run_id = shared(tracker.start_run(f"{run.arm}/seed{run.seed}", parent_id, {**tags, **run_tags(run)},
                                          run.resolved()))
        tracker.log_text(run_id, study.resolved_yaml(), "study.yaml")
        state = Checkpoint()

    unit, amount = run.budget.unit, run.budget.amount
    points = evaluation_points(amount, run.evaluation.points)
    steps = marks(amount, run.evaluation.points)  # the points' metric steps
    bar = Progress(f"{run.arm} seed {run.seed}", amount, unit.replace("_", " "), state.meter.amount(unit),
                   position, progress,
                   # a seconds budget counts fractions: show them rounded, not as 20.72675919399262/23
                   bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}{postfix}]"
                   if unit == "seconds" else None)
    outcome = "stopped"  # until the loop says how
    pending: list[tuple[str, float, int]] = []
    shown = {"tail": "-", "step_s": "-"}  # the bar's postfix: the latest tail reward and step time
    sample: list[dict] = []
    decoded: list[tuple[int, dict]] = []  # (step, step maps) of this rank's rollouts since the last evaluation point
    try:
        while state.point < len(points):
            if state.meter.amount(unit) >= points[state.point]:  # ---- an evaluation point
                mark = steps[state.point]
                with out_of_memory(f"evaluation mark {mark}", resumed_from(state, steps), "evaluation"):
                    now = start if state.point == 0 else decode(evaluator, policy)
                metrics = evaluator.metrics(now, start, hard)
                pending += [(f"eval/{k}", v, mark) for k, v in metrics.items()]
                pending += [(f"budget/{k}", v, mark) for k, v in state.meter.as_dict().items()]
                pending.append(("eval/weight_drift", weight_drift(policy.model, initial), mark))
                tracker.log_table(run_id, now.completions, evaluation_artifact(mark, "completions.json"))
                if sample:  # a sample of the last training step's completions (prompt index, text, reward)
                    tracker.log_table(run_id, sample, evaluation_artifact(mark, "train_completions.json"))
                tracker.log_npz(run_id, {"rewards": now.rewards, "hard": hard},
                                evaluation_artifact(mark, "per_prompt_rewards.npz"))
                if decoded:  # every rank has as many steps' maps (none for a method without them)
                    tracker.log_npz(run_id, merged_records(gather(decoded)), rollout_artifact(mark))
                    decoded = []
                if state.point == len(points) - 1:  # the end: the study's other evaluation draws too
                    with out_of_memory(f"evaluation mark {mark}", resumed_from(state, steps), "evaluation"):
                        pending += other_draws(extra, extra_starts, policy, mark, tracker, run_id)
                state.point += 1
                state.rows += pending
                save(checkpoint_path, method, state, sharded)
                tracker.log_rows(run_id, pending)
                pending = []
                shown["tail"] = f"{metrics['tail_reward']:.3f}"
                bar.update(state.meter.amount(unit), **shown)
                bar.line(f"evaluated at {mark}/{amount:g} {bar.unit}, {bar.seconds:.0f} s, tail {shown['tail']}")
                if on_evaluation is not None:
                    on_evaluation(mark, metrics)
                continue
            examples, prompts, texts = train_prompts(task, policy, run, state.step)
            began = time.perf_counter()
            with out_of_memory(f"step {state.step}", resumed_from(state, steps)):
                result = method.step(prompts, lambda i, text: checked_reward(task, examples[i], texts[i], text),
                                     state.step)
            seconds = time.perf_counter() - began
            before = state.meter.amount(unit)
            state.meter.used = state.meter.used + result.consumption
            if unit != "seconds" and state.meter.amount(unit) == before:
                raise RuntimeError(f"{run.method} step {state.step} consumed no {unit}: the run could never reach its "
                                   "budget (a method must report its Consumption)")
            sample = result.completions
            if getattr(result, "decoding", None) is not None:  # GRPO's step maps (methods.diagnostics)
                decoded.append((state.step, result.decoding))
            state.meter.seconds += seconds
            state.step += 1
            mark = mark_of(state.meter.amount(unit))
            pending += [(f"train/{k}", float(v), mark) for k, v in result.stats.items()]
            shown["step_s"] = f"{seconds:.1f}"
            bar.update(state.meter.amount(unit), **shown)
        if study.matched_decoding:  # after the last checkpoint: a run killed here resumes straight to it
            bar.line("matched decoding: choosing the run's own best temperature on training prompts")
            with out_of_memory("matched decoding", "its matched decoding", "evaluation"), fsdp.gathered(policy.model):
                tracker.log_rows(run_id, matched_decoding(policy, task, run.evaluation, run.task.source,
                                                          [evaluator, *extra], [(start, hard), *extra_starts],
                                                          steps[-1], tracker, run_id))
        outcome = "finished"
    except BaseException as error:
        tracker.finish(run_id, "KILLED" if isinstance(error, (KeyboardInterrupt, Stop)) else "FAILED")
        outcome = ("stopped early" if isinstance(error, Stop) else "interrupted" if isinstance(error, KeyboardInterrupt)
                   else f"failed ({type(error).__name__})")
        raise
    finally:
        bar.close(outcome)
    tracker.finish(run_id, "FINISHED")
    return Outcome(run.arm, run.seed, run_id, "finished")


def require_weights(model: str) -> None:
    """Before an invocation starts anything (no MLflow run yet): a model that is missing, or is no Fast-dLLM v2
    checkpoint by its config and tokenizer, is one error (CheckpointError), never a fallback to other weights; an
    embedded model whose checkpoint is absent or stale (one that does not ship yet) is one error too, naming its
    rebuild command."""
    from arena.model.tiny import MODELS, shipped_checkpoint

    if model in MODELS:
        shipped_checkpoint(model)
    else:
        from arena.model.policy import check_checkpoint

        check_checkpoint(model)


def start_key(run) -> str:
    """Identity of the starting evaluation: model, task and evaluation settings (and the profile)."""
    return digest([run.model, run.task, run.evaluation, run.profile])


def run_tags(run) -> dict[str, str]:
    return {"arena.method": run.method, "arena.git_commit": git_commit(), "arena.profile": run.profile or "none",
            "arena.processes": str(world()[1]), "arena.torch_threads": str(torch.get_num_threads()),
            **run.config.tags()}


def git_commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
