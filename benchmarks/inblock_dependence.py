"""How much a model's in-block joint knows beyond its single-position marginals, on its own samples.

    python -m benchmarks.inblock_dependence [--model tiny-inblock] [--task swap_sums] [--levels 1,2,3]
        [--prompts 48] [--max-new-tokens 36]

Run from the repository root, single-threaded (``OMP_NUM_THREADS=1``). The model samples one completion per
held-out prompt with the sampler the block estimators target (temperature 1, random unmasking order, its own
sub-block: ``arena.estimator_bench.sample_completions``). For every sub-block of every completion block, the
exact oracle (``methods.oracle``: enumeration of the sub-block's 2^m mask sets, later sub-blocks masked) gives
the exact random-order log-probability and the sum of the single-position marginals with the whole sub-block
masked (the ``masked`` estimator's term); their difference is the sub-block's dependence, and the masked
estimator's error against the exact term is its negative. The analytic sub-block ELBO (the ``elbo``, ``ebpo`` and
Gauss-Legendre estimators' common target) is printed beside it as its gap to the exact term (at most 0). Its mean over the
model's samples estimates the sub-block's total correlation: 0 for a model that writes every position
independently, log 2 for a pair of fair coins that always agree. Printed per level, with a 95% interval over
sub-blocks, for the sub-blocks of at least two denoised positions (``all``; a single position has none) and for
those with at least two in the answer or at its stop token (``text``; the others pad the block with stop
tokens).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from arena.estimator_bench import sample_completions
from arena.model import load_policy
from methods.oracle import completion_blocks
from rewards import load_task


def sub_block_dependences(policy, prompts: list[list[int]], completions: list[list[int]],
                          lengths: list[int]) -> list[list[dict]]:
    """Per completion, one record per sub-block holding denoised positions: how many, how many of them hold the
    text (the answer and its stop token; the rest pad the block with more stop tokens), the exact and marginal terms."""
    out = []
    for prompt, completion, length in zip(prompts, completions, lengths):
        records = []
        for block in completion_blocks(policy, prompt, completion):
            for part in block.parts:
                text = sum(block.index * policy.block_size + i < len(prompt) + length for i in part.masked)
                records.append({"positions": len(part.masked), "text": text, "exact": part.exact,
                                "marginal": part.marginal, "dependence": part.dependence, "elbo": part.elbo})
        out.append(records)
    return out


def interval(values) -> str:
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return "n/a"
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():+.3f} [{values.mean() - half:+.3f}, {values.mean() + half:+.3f}]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-inblock")
    parser.add_argument("--task", default="swap_sums")
    parser.add_argument("--levels", default="1,2,3", help="comma-separated difficulty levels (default: 1,2,3)")
    parser.add_argument("--prompts", type=int, default=48, help="held-out prompts, balanced over levels")
    parser.add_argument("--max-new-tokens", type=int, default=36)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    policy = load_policy(args.model)
    task = load_task(args.task, tuple(int(v) for v in args.levels.split(",")))
    examples = task.examples("heldout", n=args.prompts, seed=args.seed)
    prompts = [policy.encode(task.prompt(e)) for e in examples]
    generation = sample_completions(policy, prompts, args.max_new_tokens, args.seed)
    records = sub_block_dependences(policy, prompts, generation.tokens, generation.lengths)
    rewards = [task.reward(text, e) for text, e in zip(generation.texts, examples)]
    print(f"{args.model} on {args.task}: block {policy.block_size}, sub-block {policy.sub_block}, "
          f"{len(examples)} held-out prompts, one sample each at T = 1 (random order), mean reward {np.mean(rewards):.3f}")
    print(f"{'level':>6} {'where':>5} {'sub-blocks':>10} {'dependence (nats per sub-block, 95%)':>40} "
          f"{'ELBO - exact (95%)':>32} {'exact':>8} {'marginal':>9}")
    for where, least in (("all", "positions"), ("text", "text")):
        for level in [*task.levels, "all"]:
            rows = [r for e, rs in zip(examples, records) if level == "all" or e["difficulty"] == level for r in rs
                    if r[least] >= 2]
            print(f"{level!s:>6} {where:>5} {len(rows):>10} {interval([r['dependence'] for r in rows]):>40} "
                  f"{interval([r['elbo'] - r['exact'] for r in rows]):>32} "
                  f"{np.mean([r['exact'] for r in rows]):>8.3f} {np.mean([r['marginal'] for r in rows]):>9.3f}")
    print(f"({time.perf_counter() - began:.0f} s; first samples: {generation.texts[:3]})")


if __name__ == "__main__":
    main()
