"""Estimator cost on the tiny model on CPU: the shared clean stream, each estimator, packed vs per-block scoring.

    python -m benchmarks.estimator_cost [--model tiny|random] [--batch 4] [--lengths 64,256] [--repeats 3]
                                        [--tables shared,estimators,packed]

Run from the repository root (see ``benchmarks.sampler_and_scoring`` for ``--model``). Every ratio
compares two paths measured in the same run; times are medians over ``--repeats`` runs after a warm-up.

1. A K-draw ELBO (``elbo``, count form) in one packed forward whose K noisy streams share one
   clean stream, vs K separate packed passes of one draw each (the same estimator: K independent
   draws averaged), forward only and forward + backward. The token ratio is what the layout saves in
   forwarded tokens, (T + K·N) / (K·(T + N)) for T clean and N noisy tokens per stream; on a GPU the
   measured ratio approached it for K = 2 (0.80 against 0.75; docs/performance.md, the GPU anchors).
   Dense masks make attention grow with the square of the packed length, so large K can cost more than
   it saves. K = 1 runs the
   same computation both ways: its ratio shows the timing noise.
2. The cost per sample of every registered estimator at its default options (``elbo`` also at one draw,
   the baseline of the ratios): packed positions per sequence in its one forward, and the time of that
   forward, alone and with the backward, against the 1-draw ELBO measured in the same run. ``trajectory``
   is scored on one token per decoding step (its costliest case: B - 1 views a block).
3. Packed vs per-block scoring, as in ``benchmarks.sampler_and_scoring``.
"""
from __future__ import annotations

import argparse
import dataclasses

import torch

from benchmarks.sampler_and_scoring import load, random_batch, scoring_table, timed
from methods.likelihood import ESTIMATORS, estimate, sequence_logprob


def elbo_pass(policy, batch, draws: int, key: tuple[int, ...], backward: bool):
    with torch.set_grad_enabled(backward):
        est = estimate("elbo", policy, batch, key, draws=draws, form="count")
        if backward:
            sequence_logprob(est).sum().backward()
    return est.forward_tokens


def shared_vs_separate(policy, batch: int, length: int, prompt: int, draws: list[int], repeats: int) -> None:
    rows = random_batch(policy, batch, prompt, length)
    print(f"\nK-draw ELBO: shared clean stream (one pass) vs K separate packed passes, batch {batch}, "
          f"length {length}, prompt {prompt}, block {policy.block_size}")
    print("ratio = shared / separate: below 1, the shared clean stream saves time")
    print(f"{'K':>3} {'shared ms':>10} {'separate ms':>12} {'ratio':>6} {'fwd+bwd shared':>15} {'separate':>9} "
          f"{'ratio':>6} {'token ratio':>12}")
    for k in draws:
        times, tokens = {}, {}
        for backward in (False, True):
            times["shared", backward], tokens["shared"] = timed(
                lambda: elbo_pass(policy, rows, k, (0, 0, 0), backward), repeats)
            times["separate", backward], tokens["separate"] = timed(
                lambda: sum(elbo_pass(policy, rows, 1, (0, 0, d), backward) for d in range(k)), repeats)
            policy.model.zero_grad(set_to_none=True)
        forward = times["shared", False] / times["separate", False]
        both = times["shared", True] / times["separate", True]
        print(f"{k:>3} {1e3 * times['shared', False]:>10.1f} {1e3 * times['separate', False]:>12.1f} {forward:>6.2f} "
              f"{1e3 * times['shared', True]:>15.1f} {1e3 * times['separate', True]:>9.1f} {both:>6.2f} "
              f"{tokens['shared'] / tokens['separate']:>12.2f}")


def one_token_per_step(batch):
    """The batch with recorded steps for ``trajectory``: each completion token decoded at its own step, in order."""
    positions = torch.arange(batch.ids.shape[1])[None]
    steps = torch.where(batch.completion, positions - batch.prompt_lengths[:, None], -1)
    return dataclasses.replace(batch, steps=steps)


def scored(policy, batch, name: str, options: dict, backward: bool) -> int:
    with torch.set_grad_enabled(backward):
        est = estimate(name, policy, batch, (0, 0, 0), **options)
        if backward:
            sequence_logprob(est).sum().backward()
            policy.model.zero_grad(set_to_none=True)
    return est.forward_tokens


def estimator_table(policy, batch: int, length: int, prompt: int, repeats: int) -> None:
    rows = one_token_per_step(random_batch(policy, batch, prompt, length))
    settings = [("elbo", {"draws": 1})] + [(name, {}) for name in ESTIMATORS]
    print(f"\ncost per sample of every estimator (default options; elbo also at 1 draw, the baseline), batch {batch}, "
          f"length {length}, prompt {prompt}, block {policy.block_size}, sub-block {policy.sub_block}")
    print("one packed forward per sample; ratio = this estimator / elbo draws=1, forward+backward")
    print(f"{'estimator':<22} {'positions/sample':>16} {'fwd ms':>8} {'fwd+bwd ms':>11} {'ratio':>6}")
    base = None
    for name, options in settings:
        forward, tokens = timed(lambda: scored(policy, rows, name, options, False), repeats)
        both, _ = timed(lambda: scored(policy, rows, name, options, True), repeats)
        base = both if base is None else base
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        print(f"{label:<22} {tokens / batch:>16.0f} {1e3 * forward:>8.1f} {1e3 * both:>11.1f} {both / base:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "random"], default="tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lengths", default="64,256", help="prompt + completion tokens per row, comma separated")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tables", default="shared,estimators,packed", help="which of the tables 1-3 to print")
    args = parser.parse_args()
    policy = load(args.model)
    print(f"model {args.model} ({sum(p.numel() for p in policy.model.parameters()):,} parameters), "
          f"{torch.get_num_threads()} torch threads, times: median of {args.repeats}")
    tables, lengths = args.tables.split(","), [int(n) for n in args.lengths.split(",")]
    for length in lengths if "shared" in tables else []:
        shared_vs_separate(policy, args.batch, length, args.prompt, [1, 2, 4, 8], args.repeats)
    for length in lengths if "estimators" in tables else []:
        estimator_table(policy, args.batch, length, args.prompt, args.repeats)
    if "packed" in tables:
        scoring_table(policy, args.batch, [32, 128, 512], args.repeats, args.prompt)


if __name__ == "__main__":
    main()
