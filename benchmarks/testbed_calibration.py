"""The start model of a testbed, decoded at several temperatures: mean, tail, exact match, per-part accuracy,
and the sharpening control (the best temperature, no training).

    python -m benchmarks.testbed_calibration [--model tiny-multiblock] [--task multi_sum] [--levels 11]
        [--max-new-tokens 33] [--temperatures 0,0.5,0.7,0.85,1]

Run from the repository root, single-threaded (``OMP_NUM_THREADS=1``). The study's evaluation protocol
(``arena.evaluate``: 128 prompts x 8 samples, common decoding seeds) on two prompt sets: the train split
(evaluation seed 1, the prompts tuning uses) and the held-out split (seed 0, the prompts studies report
on). The sharpening control picks the temperature with the best tail on the *train* split and reports
its tail gain on the held-out split against temperature 1, the studies' evaluation temperature: what
decoding alone buys, with no training. Per-part accuracy splits multi_sum's parts by whether the sum
carries (where the teacher's mode is the dropped carry, or for swap_sums the swapped digits) or not;
swap_sums adds the share of carry parts written swapped and the mean reward per level.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from arena.evaluate import Evaluator, lower_cvar
from arena.model import load_policy
from arena.study import EvaluationSpec
from rewards import load_task


def part_accuracy(evaluator: Evaluator, evaluation) -> dict[str, float]:
    """multi_sum's and swap_sums' parts right, split by carry, and swap_sums' carry parts written swapped (its
    teacher's wrong mode) and mean reward per level; empty for other tasks."""
    from rewards.multi_sum import part_answer, part_results

    if evaluator.task.name not in ("multi_sum", "swap_sums"):
        return {}
    k = evaluation.rewards.shape[1]
    right = {"carry": [0, 0], "no carry": [0, 0]}
    swapped, levels = [0, 0], {}
    for row, sample in enumerate(evaluation.completions):
        example = evaluator.examples[row // k]
        levels.setdefault(example["difficulty"], []).append(evaluation.rewards[row // k, row % k])
        written = sample["completion"].strip().split(";")
        for i, (total, ok) in enumerate(zip(example["sums"], part_results(sample["completion"], example))):
            kind = right["carry" if total >= 10 else "no carry"]
            kind[0] += ok
            kind[1] += 1
            if total >= 10:
                swapped[0] += i < len(written) and written[i] == part_answer(total)[::-1] != part_answer(total)
                swapped[1] += 1
    out = {f"{kind} parts": hits / count for kind, (hits, count) in right.items() if count}
    if evaluator.task.name == "swap_sums":
        out["carry swapped"] = swapped[0] / max(swapped[1], 1)
        out.update({f"level {level}": float(np.mean(v)) for level, v in sorted(levels.items())})
    return out


def measure(policy, task, split: str, seed: int, temperature: float, max_new_tokens: int) -> dict[str, float]:
    spec = EvaluationSpec(split=split, seed=seed, temperature=temperature, max_new_tokens=max_new_tokens)
    evaluator = Evaluator(task, spec)
    began = time.perf_counter()
    evaluation = evaluator.decode(policy)
    p = evaluation.per_prompt
    row = {"mean": float(p.mean()), "tail": lower_cvar(p, spec.primary_alpha), "seconds": time.perf_counter() - began}
    row.update(evaluator.sample_means(evaluation))  # the task's own metrics (none by default)
    return {**row, **part_accuracy(evaluator, evaluation)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-multiblock")
    parser.add_argument("--task", default="multi_sum")
    parser.add_argument("--levels", default="11", help="comma-separated difficulty levels (default: 11)")
    parser.add_argument("--max-new-tokens", type=int, default=33)
    parser.add_argument("--temperatures", default="0,0.5,0.7,0.85,1")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    policy = load_policy(args.model, device="cpu")
    task = load_task(args.task, tuple(int(x) for x in args.levels.split(",")))
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rows = {(split, t): measure(policy, task, split, seed, t, args.max_new_tokens)
            for split, seed in (("train", 1), ("heldout", 0)) for t in temperatures}
    columns = [c for c in next(iter(rows.values())) if c != "seconds"] + ["seconds"]
    print(f"{args.model} on {args.task}: 128 prompts x 8 samples per row; tail = lower CVaR at 0.25")
    print(f"{'split':8} {'T':>5} " + " ".join(f"{c:>15}" for c in columns))
    for (split, t), row in rows.items():
        print(f"{split:8} {'greedy' if t == 0 else t:>5} " + " ".join(f"{row[c]:>15.3f}" for c in columns))
    best = max(temperatures, key=lambda t: rows[("train", t)]["tail"])
    base = rows[("heldout", 1.0)] if 1.0 in temperatures else None
    if base is not None:
        chosen = rows[("heldout", best)]
        print(f"sharpening control: T = {best:g} (best tail on the train split); on held-out, against T = 1: "
              f"tail gain {chosen['tail'] - base['tail']:+.3f}, mean gain {chosen['mean'] - base['mean']:+.3f}")


if __name__ == "__main__":
    main()
