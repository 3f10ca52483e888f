"""A study's plan: every arm's memory, verdict and the change that makes it fit; the runs' time and GPU-hours."""
from __future__ import annotations

import dataclasses
import math

from arena.plan.assumptions import BANDWIDTH_USE, GIB, GPUS, MFU, PROMPT_TOKENS, TOKENS_PER_STEP, USABLE
from arena.plan.cost import decode_seconds, step_cost
from arena.plan.footprint import host, memory
from arena.plan.shape import Shape, lengths


def _fits(parts: dict, gpu: dict) -> bool:
    return parts["peak"] <= USABLE * gpu["memory"]


def _fix(shape, gpu, gpus: int, run, config, evaluation: tuple[int, int], weight_bytes: int) -> tuple[list, dict, int]:
    """The changes that bring the arm under the GPU's memory: for training, the first of a smaller micro-batch,
    LoRA (rank 128, as the profiles) and FSDP over k <= ``gpus`` GPUs that fits; for a rollout or evaluation batch
    too large, the most rows one generate call may hold. Returns (changes, the parts after them, GPUs per run)."""
    limit = USABLE * gpu["memory"]

    def parts(cfg, k=1, rows=evaluation[0]):
        return memory(shape, run.method, cfg, run.train.prompts_per_step, rows, evaluation[1],
                      weight_bytes=weight_bytes, fsdp=k)

    grpo, changes, k = hasattr(config, "group_size"), [], 1
    if parts(config)["phases"]["train"] > limit:
        micro = config.micro_batch or run.train.prompts_per_step * config.group_size if grpo else 1
        tries = [(f"micro_batch: {m}", dataclasses.replace(config, micro_batch=m), 1) for m in range(micro - 1, 0, -1)]
        if config.trainable != "lora":
            tries.append(("trainable: lora (rank 128)", dataclasses.replace(
                config, trainable="lora", lora_rank=128, lora_alpha=64.0, **({"micro_batch": 1} if grpo else {})), 1))
            tries += [(f"sharding: fsdp over {2 ** e} GPUs", config, 2 ** e)
                      for e in range(1, gpus.bit_length()) if grpo]
        for change, cfg, shards in tries:
            if parts(cfg, shards)["phases"]["train"] <= limit:
                changes, config, k = [change], cfg, shards
                break
        else:
            changes = ["no micro-batch, LoRA or FSDP within the GPUs fits training"]
    after = parts(config, k)
    if after["phases"]["rollout"] > limit:
        changes.append(f"the rollout batch ({after['rollout'] / GIB:.0f} GiB) does not fit: fewer prompts_per_step")
    if after["phases"]["evaluation"] > limit:
        rows = evaluation[0]
        while rows > 1 and parts(config, k, rows)["phases"]["evaluation"] > limit:
            rows //= 2
        changes.append(f"evaluation.decode_batch: {rows} (the evaluation's {evaluation[0]} rows a call do not fit)")
        after = parts(config, k, rows)
    return changes, after, k


def plan_study(study, shape: Shape, gpu_kind: str, gpus: int, weight_bytes: int = 2) -> dict:
    """Per arm: memory by part (bytes per GPU), fits or not, the change that makes it fit, seconds per run and
    GPU-hours over its runs; and the study's totals (``format_plan`` prints it, ``--json`` dumps it)."""
    gpu, spec = GPUS[gpu_kind], study.evaluation
    rows = spec.prompts * spec.samples
    evaluation = (min(spec.decode_batch or rows, rows), spec.max_new_tokens)  # rows a generate call holds
    budget, arms, shared = study.budget, {}, 0.0
    for run in study.runs():
        if run.arm in arms:
            arms[run.arm]["runs"] += 1
            continue
        config = run.config
        if not (hasattr(config, "group_size") or hasattr(config, "population")):
            arms[run.arm] = {"method": run.method, "runs": 1, "error": "not a GRPO-family or ES method: not planned"}
            continue
        parts = memory(shape, run.method, config, run.train.prompts_per_step, *evaluation, weight_bytes=weight_bytes)
        fits = _fits(parts, gpu)
        changes, after, used = ([], parts, 1) if fits else _fix(shape, gpu, gpus, run, config, evaluation, weight_bytes)
        step = step_cost(shape, gpu, run.method, config, run.train.prompts_per_step, weight_bytes=weight_bytes)
        per_step = step[budget.unit]
        steps = math.ceil(budget.amount / per_step) if per_step else 0
        decode = math.ceil(rows / evaluation[0]) * decode_seconds(
            shape, gpu, evaluation[0], lengths(config, 32, 8, spec.max_new_tokens), 32, weight_bytes)
        evaluations = (spec.points - 1) + (spec.draws - 1) + (9 if study.matched_decoding else 0)
        seconds = (steps * step["seconds"] + evaluations * decode) / used
        arms[run.arm] = {"method": run.method, "runs": 1, "memory": parts, "host": host(shape, config, used),
                         "fits": fits, "changes": changes,
                         "peak_after_changes": after["peak"], "gpus_per_run": used, "steps": steps,
                         "step_seconds": {k: step[k] for k in ("rollout", "scoring", "optimizer", "perturb")
                                          if k in step},
                         "evaluation_seconds": evaluations * decode, "run_hours": seconds / 3600}
        shared = 2 * spec.draws * decode  # the starting decode and the hard subset of every draw, once a study
    for arm in arms.values():
        if "run_hours" in arm:
            arm["gpu_hours"] = arm["run_hours"] * arm["runs"] * arm["gpus_per_run"]
    total = sum(arm.get("gpu_hours", 0.0) for arm in arms.values()) + shared / 3600
    return {"study": study.name, "profile": study.profile, "gpu": gpu_kind, "gpus": gpus,
            "shape": dataclasses.asdict(shape),
            "prompt_tokens": PROMPT_TOKENS, "mfu": MFU, "bandwidth_use": BANDWIDTH_USE, "usable": USABLE,
            "budget": {"unit": budget.unit, "amount": budget.amount}, "arms": arms, "gpu_hours": total,
            "wall_hours": total / gpus}


def format_plan(plan: dict) -> str:
    gpu = GPUS[plan["gpu"]]
    shape = Shape(**plan["shape"])
    lines = [f"plan for {plan['study']} at {plan['profile'] or 'the study model'} ({shape.parameters():,} parameters) "
             f"on {plan['gpus']} x {gpu['name']}: memory per GPU in GiB (fits under {USABLE:.0%} of "
             f"{gpu['memory'] / 1e9:.0f} GB), time at MFU {MFU['scoring']} (scoring) / {MFU['decoding']} (decoding) "
             f"of {gpu['peak'] / 1e12:.0f} TFLOP/s and {BANDWIDTH_USE} of {gpu['bandwidth'] / 1e12:.2f} TB/s", ""]
    names = ("weights", "trainable", "gradients", "optimizer", "masters", "reference", "activations", "rollout",
             "evaluation", "peak")
    width = max(len(a) for a in plan["arms"]) + 1
    lines.append(f"{'arm':<{width}}" + "".join(f"{n[:11]:>12}" for n in names) + "  fits  change that makes it fit")
    for name, arm in plan["arms"].items():
        if "error" in arm:
            lines.append(f"{name:<{width}} {arm['error']}")
            continue
        memory = arm["memory"]
        fix = "" if arm["fits"] else "; ".join(arm["changes"]) + f" (peak {arm['peak_after_changes'] / GIB:.1f})"
        lines.append(f"{name:<{width}}" + "".join(f"{memory[n] / GIB:>12.2f}" for n in names)
                     + f"  {'yes' if arm['fits'] else 'NO':>4}  {fix}")
    lines += ["", f"{'arm':<{width}} {'runs':>4} {'steps':>6} {'s/step':>8} {'of which':<40} {'eval h':>7} "
                  f"{'h/run':>7} {'GPUs':>4} {'GPU-h':>8}"]
    for name, arm in plan["arms"].items():
        if "error" in arm:
            continue
        phases = ", ".join(f"{k} {v:.0f}" for k, v in arm["step_seconds"].items())
        lines.append(f"{name:<{width}} {arm['runs']:>4} {arm['steps']:>6} {sum(arm['step_seconds'].values()):>8.1f} "
                     f"{phases:<40} {arm['evaluation_seconds'] / 3600:>7.2f} {arm['run_hours']:>7.2f} "
                     f"{arm['gpus_per_run']:>4} {arm['gpu_hours']:>8.1f}")
    lines += ["", f"study: {plan['gpu_hours']:.1f} GPU-hours, about {plan['wall_hours']:.1f} h on {plan['gpus']} GPU"
                  f"{'s' if plan['gpus'] > 1 else ''} (runs spread over them); a planning approximation: prompts of "
                  f"{PROMPT_TOKENS} tokens, {TOKENS_PER_STEP} tokens a decoding step at threshold < 1, attention FLOPs "
                  "left out (arena/plan/assumptions.py states each number's source)",
              "", "host memory per run (GiB; beyond the process's imports, the CUDA runtime's and the checkpoint "
                  "loading's mapped pages):"]
    for name, arm in plan["arms"].items():
        if "host" in arm:
            lines.append(f"{name:<{width}} " + ", ".join(f"{k} {v / GIB:.2f}" for k, v in arm["host"].items()
                                                         if k != "peak") + f": peak {arm['host']['peak'] / GIB:.1f}")
    return "\n".join(lines)
