"""The sub-block cache (``SamplerConfig.sub_block_cache``) on the CPU: positions forwarded, time, tokens, likelihood.

    python -m benchmarks.sub_block_cache [--batch 8] [--repeats 3] [--max-new-tokens 48] [--no-wide]

Run from the repository root. Each row decodes the same prompts with and without the cache in the same
run (times: medians over ``--repeats`` after one warm-up) on:
- ``tiny`` (blocks of 8) at its own sub-block 4 and at 2, on held-out ``noisy_arithmetic`` prompts;
- ``tiny-multiblock`` (blocks of 16, sub-blocks of 8) at 8 and 4, on held-out ``multi_sum`` prompts;
- ``wide``: an untrained 4-layer, 512-wide network at Fast-dLLM v2's geometry (blocks of 32, sub-blocks
  of 8) on the same arithmetic prompts; untrained, so its decoding order (and so its refresh rate) is
  not a trained model's, but its per-position cost is closer to a real one's.

Columns: positions forwarded per committed token without / with the cache (every forward: prompt,
denoising steps, commits) and their ratio; of the denoising steps' row-forwards, the share that were
refreshes (full block); ms per committed token and the speed-up; the share of completions identical to
the uncached ones (the cache changes the logits); and the scorer check: the largest |trajectory
estimator's term - log of the probability the sampler drew the token with| over all tokens, uncached and
cached (0 up to rounding when the scorer replays the sampler; the cached rollouts are what
``block_grpo`` refuses to score with the trajectory estimator).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import time

import torch

from arena.model import load_policy
from arena.model.kv_cache import BlockCacheView
from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import TinyConfig, build_policy
from methods.likelihood import ScoringBatch, estimate
from rewards import get_task


def timed(fn, repeats: int):
    """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up, and its last result."""
    result, seconds = fn(), []
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), result


def prompts_of(policy, task_name: str, batch: int) -> list[list[int]]:
    task = get_task(task_name)
    return [policy.encode(task.prompt(e, policy.tokenizer)) for e in task.examples("heldout", n=batch, seed=0)]


class Counting:
    """``policy`` with its forwards through the sub-block cache counted: rows refreshed, rows stepped."""

    def __init__(self, policy):
        self.policy, self.refreshed, self.stepped = policy, 0, 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def hidden(self, input_ids, position_ids, attention_mask, cache=None):
        if isinstance(cache, BlockCacheView):
            if cache.in_block is None:
                self.refreshed += input_ids.shape[0]
            else:
                self.stepped += input_ids.shape[0]
        return self.policy.hidden(input_ids, position_ids, attention_mask, cache)


def refresh_share(policy, prompts, config) -> float:
    """Share of the denoising row-forwards through the cache that were refreshes (the whole block)."""
    counting = Counting(policy)
    generate(counting, prompts, config, seed=0)
    return counting.refreshed / max(1, counting.refreshed + counting.stepped)


def scorer_gap(policy, prompts, out, temperature: float, sub_block) -> float:
    """Largest |trajectory term - log(sampler's probability)| over the completion tokens."""
    batch = ScoringBatch.build(prompts, out.tokens, policy.pad_id, policy.block_size, temperature,
                               sub_block=sub_block, steps=out.steps)
    with torch.no_grad():
        est = estimate("trajectory", policy, batch, (0, 0, 0))
    gap = 0.0
    for row, (prompt, probs) in enumerate(zip(prompts, out.probs)):
        got = est.token_logp[row, len(prompt) : len(prompt) + len(probs)].double()
        gap = max(gap, float((got - torch.tensor([math.log(p) for p in probs], dtype=torch.float64)).abs().max()))
    return gap


def row(name, policy, prompts, sub_block, args) -> None:
    config = SamplerConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, sub_block=sub_block)
    cached_config = dataclasses.replace(config, sub_block_cache=True)
    off_s, off = timed(lambda: generate(policy, prompts, config, seed=0), args.repeats)
    on_s, on = timed(lambda: generate(policy, prompts, cached_config, seed=0), args.repeats)
    per_off = off.forward_tokens / sum(map(len, off.tokens))
    per_on = on.forward_tokens / sum(map(len, on.tokens))
    ms_off, ms_on = 1e3 * off_s / sum(map(len, off.tokens)), 1e3 * on_s / sum(map(len, on.tokens))
    same = sum(a == b for a, b in zip(off.tokens, on.tokens)) / len(prompts)
    gaps = [scorer_gap(policy, prompts, out, 1.0, sub_block) for out in (off, on)]
    S = sub_block or policy.sub_block
    print(f"{name:>16} {policy.block_size:>3}/{S:<3} {per_off:>8.1f} {per_on:>8.1f} {per_off / per_on:>6.2f}x "
          f"{refresh_share(policy, prompts, cached_config):>8.2f} {ms_off:>8.2f} {ms_on:>8.2f} "
          f"{ms_off / ms_on:>6.2f}x {same:>6.2f} {gaps[0]:>9.1e} {gaps[1]:>9.1e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--no-wide", action="store_true", help="skip the 512-wide untrained network")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"batch {args.batch}, temperature 1, threshold 1 (one token a step), confidence order, "
          f"max {args.max_new_tokens} new tokens; {torch.get_num_threads()} torch threads, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; times: median of {args.repeats}")
    print(f"{'model':>16} {'B/S':>7} {'pos/tok':>8} {'cached':>8} {'ratio':>7} {'refresh':>8} {'ms/tok':>8} "
          f"{'cached':>8} {'speed':>7} {'same':>6} {'gap off':>9} {'gap on':>9}")
    tiny, multi = load_policy("tiny"), load_policy("tiny-multiblock")
    arithmetic = prompts_of(tiny, "noisy_arithmetic", args.batch)
    for sub_block in (None, 2):
        row("tiny", tiny, arithmetic, sub_block, args)
    sums = prompts_of(multi, "multi_sum", args.batch)
    for sub_block in (None, 4):
        row("tiny-multiblock", multi, sums, sub_block, args)
    if not args.no_wide:
        wide = build_policy(TinyConfig(layers=4, hidden=512, heads=8, kv_heads=2, intermediate=1536, block_size=32,
                                       sub_block=8))
        row("wide (untrained)", wide, arithmetic, None, args)


if __name__ == "__main__":
    main()
