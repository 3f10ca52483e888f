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
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from arena.budget import Consumption, Meter, evaluation_points
from arena.evaluate import Evaluation, Evaluator, checked_reward
from arena.rng import seed_of
from arena.study import digest, load_task, method_class

TRAIN_PROMPTS = 7  # key domain of the training prompt draws


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


def save(path: Path, method, checkpoint: Checkpoint) -> None:
    """Write atomically: a kill during the write leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    torch.save({"method": method.state_dict(), "runner": dataclasses.asdict(checkpoint)}, staging)
    os.replace(staging, path)


def load(path: Path, method) -> Checkpoint:
    state = torch.load(path, weights_only=False)
    method.load_state_dict(state["method"])
    runner = state["runner"]
    meter = Meter(used=Consumption(**runner["meter"]["used"]), seconds=runner["meter"]["seconds"])
    return Checkpoint(runner["step"], runner["point"], meter, [tuple(r) for r in runner["rows"]])


def starting_evaluation(evaluator: Evaluator, policy, cache: Path) -> tuple[Evaluation, np.ndarray]:
    """The evaluation at budget 0 and the hard subset, shared by every run that starts from this model."""
    if cache.exists():
        saved = np.load(cache, allow_pickle=False)
        completions = json.loads(str(saved["completions"]))
        return Evaluation(saved["rewards"], completions), saved["hard"]
    start, hard = evaluator.decode(policy), evaluator.hard_subset(policy)
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = cache.with_name(cache.name + f".{os.getpid()}.tmp.npz")
    np.savez(staging, rewards=start.rewards, hard=hard, completions=json.dumps(start.completions))
    os.replace(staging, cache)
    return start, hard


def weight_drift(model, initial: dict[str, torch.Tensor]) -> float:
    """||W - W0|| / ||W0|| over the network's effective weights (LoRA deltas merged), in fp32.

    ``initial`` holds the weights before the method wrapped the model (plain parameter names).
    """
    moved = total = 0.0
    for module in model.modules():  # LoRA: the adapters' product is the weights' change
        if hasattr(module, "get_delta_weight"):
            for adapter in module.active_adapters:
                moved += float(module.get_delta_weight(adapter).float().square().sum())
    for name, param in model.named_parameters():
        key = name.replace("base_model.model.", "").replace(".base_layer", "")
        if key in initial:
            start = initial[key].float()
            moved += float((param.detach().float().cpu() - start).square().sum())
            total += float(start.square().sum())
    return math.sqrt(moved / total) if total else 0.0


def train_prompts(task, policy, run, step: int) -> tuple[list[dict], list[list[int]], list[str]]:
    """The step's training prompts: drawn by (seed, step), so every arm of a seed sees the same ones."""
    examples = task.examples("train", n=run.train.prompts_per_step, seed=seed_of(run.seed, TRAIN_PROMPTS, step),
                             source=run.task.source)
    texts = [task.prompt(e, policy.tokenizer) for e in examples]
    return examples, [policy.encode(t) for t in texts], texts


class Stop(Exception):
    """Raised by an ``on_evaluation`` callback to end a run early (a tuner pruning a trial): the run is
    marked KILLED, and what it logged stays."""


def execute(run, study, tracker, parent_id: str | None, workdir: Path, device: str | None = None,
            position: int = 0, force: bool = False, progress: bool = True, on_evaluation=None,
            tags: dict[str, str] | None = None) -> Outcome:
    """Run (or resume, or skip) one (arm, seed) of ``study``; everything it measures goes to ``tracker``.

    ``on_evaluation(mark, metrics)``, if given, is called after each evaluation point is logged (the
    metrics without their ``eval/`` prefix); it may raise ``Stop``. ``tags`` (a tuner's ``arena.tune``,
    ``arena.trial``) go on the run and, with the run's identity, find it again.
    """
    from arena.model import load_policy

    tags = {"arena.study": run.study, "arena.arm": run.arm, "arena.seed": str(run.seed),
            "arena.config_hash": run.config_hash, **(tags or {})}
    directory = run_directory(workdir, run)
    checkpoint_path = directory / "checkpoint.pt"
    previous = tracker.find_runs(tags)
    if previous and previous[0].status == "FINISHED" and not force:
        return Outcome(run.arm, run.seed, previous[0].run_id, "skipped")
    resume = bool(previous) and checkpoint_path.exists() and not force

    policy = load_policy(run.model, device=device)
    task = load_task(run.task)
    config = run.config()
    initial = {name: p.detach().to("cpu", copy=True) for name, p in policy.model.named_parameters()}
    method = method_class(run.method)(policy, config, run.seed)
    evaluator = Evaluator(task, run.evaluation, policy.tokenizer, run.task.source)
    start, hard = starting_evaluation(evaluator, policy, Path(workdir) / run.study / f"start-{start_key(run)}.npz")

    if resume:
        run_id = previous[0].run_id
        tracker.reopen(run_id)
        state = load(checkpoint_path, method)
        tracker.log_missing(run_id, state.rows)
    else:
        run_id = tracker.start_run(f"{run.arm}/seed{run.seed}", parent_id, {**tags, **run_tags(run, config)},
                                   run.resolved())
        tracker.log_text(run_id, study.resolved_yaml(), "study.yaml")
        state = Checkpoint()

    unit, amount = run.budget.unit, run.budget.amount
    points = evaluation_points(amount, run.evaluation.points)
    bar = tqdm(total=amount, initial=min(state.meter.amount(unit), amount),
               desc=f"{run.arm} seed {run.seed}", unit=unit.replace("_", " "), position=position, leave=True,
               disable=not progress, dynamic_ncols=True)
    pending: list[tuple[str, float, int]] = []
    shown = {"tail": "-", "step_s": "-"}  # the bar's postfix: the latest tail reward and step time
    sample: list[dict] = []
    try:
        while state.point < len(points):
            if state.meter.amount(unit) >= points[state.point]:  # ---- an evaluation point
                now = start if state.point == 0 else evaluator.decode(policy)
                metrics = evaluator.metrics(now, start, hard)
                mark = int(round(points[state.point]))
                pending += [(f"eval/{k}", v, mark) for k, v in metrics.items()]
                pending += [(f"budget/{k}", v, mark) for k, v in state.meter.as_dict().items()]
                pending.append(("eval/weight_drift", weight_drift(policy.model, initial), mark))
                tracker.log_table(run_id, now.completions, f"evaluations/{mark:09d}/completions.json")
                if sample:  # a sample of the last training step's completions (prompt index, text, reward)
                    tracker.log_table(run_id, sample, f"evaluations/{mark:09d}/train_completions.json")
                tracker.log_npz(run_id, {"rewards": now.rewards, "hard": hard},
                                f"evaluations/{mark:09d}/per_prompt_rewards.npz")
                state.point += 1
                state.rows += pending
                save(checkpoint_path, method, state)
                tracker.log_rows(run_id, pending)
                pending = []
                shown["tail"] = f"{metrics['tail_reward']:.3f}"
                bar.set_postfix(shown, refresh=False)
                if on_evaluation is not None:
                    on_evaluation(mark, metrics)
                continue
            examples, prompts, texts = train_prompts(task, policy, run, state.step)
            began = time.perf_counter()
            result = method.step(prompts, lambda i, text: checked_reward(task, examples[i], texts[i], text),
                                 state.step)
            seconds = time.perf_counter() - began
            before = state.meter.amount(unit)
            state.meter.used = state.meter.used + result.consumption
            if unit != "seconds" and state.meter.amount(unit) == before:
                raise RuntimeError(f"{run.method} step {state.step} consumed no {unit}: the run could never reach its "
                                   "budget (a method must report its Consumption)")
            sample = result.completions
            state.meter.seconds += seconds
            state.step += 1
            mark = int(round(state.meter.amount(unit)))
            pending += [(f"train/{k}", float(v), mark) for k, v in result.stats.items()]
            bar.update(min(state.meter.amount(unit), amount) - min(before, amount))
            shown["step_s"] = f"{seconds:.1f}"
            bar.set_postfix(shown, refresh=False)
    except BaseException as error:
        tracker.finish(run_id, "KILLED" if isinstance(error, (KeyboardInterrupt, Stop)) else "FAILED")
        raise
    finally:
        bar.close()
    tracker.finish(run_id, "FINISHED")
    return Outcome(run.arm, run.seed, run_id, "finished")


def start_key(run) -> str:
    """Identity of the starting evaluation: model, task and evaluation settings (and the profile)."""
    return digest([run.model, run.task, run.evaluation, run.profile])


def run_tags(run, config) -> dict[str, str]:
    tags = {"arena.method": run.method, "arena.git_commit": git_commit(), "arena.profile": run.profile or "none"}
    if hasattr(config, "estimator"):
        tags["arena.estimator"] = str(config.estimator)
    return tags


def git_commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
