"""Sampler and scorer speed on the tiny model on CPU: the block KV cache, and packed vs per-block scoring.

    python -m benchmarks.sampler_and_scoring [--model tiny|random] [--batch 8] [--repeats 3]

Run from the repository root. ``tiny`` is the pretrained tiny model (trained and cached on first use);
``random`` is the same architecture untrained (timings do not depend on weight values, but the
pretrained model stops at its answer). Every ratio compares two paths measured in the same run; times
are medians over ``--repeats`` runs after one warm-up.

1. Generation: completion tokens/s with and without the block KV cache, greedy, for prompts of growing
   length (few-shot arithmetic), and the ratio. Without the cache every denoising step re-forwards the
   whole prefix.
2. Scoring (``masked`` over whole blocks, sub-block = block: first-token term + the rest of each block
   masked): the packed layout, one
   forward over [clean | noisy] for every block at once, vs per-block scoring, one forward per block over
   the clean prefix and that noisy block (as the oracle scores). The largest difference of the per-block
   log-probs checks that both compute the same numbers.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from arena.model.layout import block_causal_mask
from arena.model.sampler import SamplerConfig, generate
from arena.model import load_policy
from arena.model.tiny import build_policy
from methods.likelihood import ScoringBatch, estimate
from rewards import get_task


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up, and its last result."""
    result = fn()
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), result


def load(model: str):
    return load_policy("tiny") if model == "tiny" else build_policy()


def random_batch(policy, batch: int, prompt: int, length: int, seed: int = 0) -> ScoringBatch:
    """Rows of ``prompt`` + ``length - prompt`` random character tokens (timings do not depend on them)."""
    generator = torch.Generator().manual_seed(seed)
    low = policy.tokenizer.convert_tokens_to_ids("0")
    ids = torch.randint(low, low + 10, (batch, length), generator=generator).tolist()
    return ScoringBatch.build([r[:prompt] for r in ids], [r[prompt:] for r in ids], policy.pad_id, policy.block_size)


@torch.no_grad()
def per_block_scores(policy, batch: ScoringBatch) -> tuple[torch.Tensor, int]:
    """``masked`` per block (n, blocks) with one forward per block, and the forward tokens used.

    Block k: the clean blocks < k, then block k with every completion position but its first masked,
    under the block-causal mask; the first token is scored from the clean position kB-1.
    """
    B = policy.block_size
    n, T = batch.ids.shape
    positions = torch.arange(T, device=batch.ids.device)
    maskable = batch.completion & (positions % B != 0)
    out, tokens = torch.zeros(n, T // B, device=batch.ids.device), 0
    for k in range(int(batch.prompt_lengths.min()) // B, T // B):
        end = (k + 1) * B
        noisy = torch.where(maskable[:, :end] & (positions[:end] >= k * B), policy.mask_id, batch.ids[:, :end])
        pos = positions[:end].expand(n, -1)
        hidden = policy.hidden(noisy, pos, block_causal_mask(pos, pos, B, batch.valid[:, :end]))
        predictors = (positions[k * B : end] - 1).clamp_min(0)  # the token shift; position 0 is never scored
        logp = torch.log_softmax(policy.logits(hidden[:, predictors]) / batch.temperature, -1)
        scores = logp.gather(-1, batch.ids[:, k * B : end, None]).squeeze(-1)
        out[:, k] = (scores * batch.completion[:, k * B : end]).sum(-1)
        tokens += n * end
    return out, tokens


def scoring_table(policy, batch: int, lengths: list[int], repeats: int, prompt: int = 16) -> None:
    print(f"\npacked vs per-block scoring (the masked estimator over whole blocks, forward only), batch {batch}, "
          f"prompt {prompt} tokens, block {policy.block_size}; ratio = per-block / packed time")
    print(f"{'length':>7} {'blocks':>7} {'packed ms':>10} {'per-block ms':>13} {'ratio':>7} "
          f"{'packed tok':>11} {'per-block tok':>14} {'max |diff|':>11}")
    for length in lengths:
        # whole blocks (sub-block = block): the masked estimator's sub-block chain scores another quantity
        rows = dataclasses.replace(random_batch(policy, batch, prompt, length), sub_block=policy.block_size)
        with torch.no_grad():
            packed_s, packed = timed(lambda: estimate("masked", policy, rows, (0, 0, 0)), repeats)
        per_block_s, (per_block, per_block_tokens) = timed(lambda: per_block_scores(policy, rows), repeats)
        diff = float((packed.logp - per_block).abs().max())
        print(f"{length:>7} {length // policy.block_size:>7} {1e3 * packed_s:>10.2f} {1e3 * per_block_s:>13.2f} "
              f"{per_block_s / packed_s:>6.2f}x {packed.forward_tokens:>11} {per_block_tokens:>14} {diff:>11.1e}")


def few_shot_prompts(policy, batch: int, context: int) -> list[list[int]]:
    """Held-out arithmetic questions, each after solved training items up to about ``context`` tokens."""
    task = get_task("arithmetic")
    shots = [f"{task.prompt(e)}{e['answer']}\n" for e in task.examples("train", n=256, seed=1)]
    prompts = []
    for i, example in enumerate(task.examples("heldout", n=batch, seed=0)):
        text, j = task.prompt(example), i
        while len(text) + len(shots[j % len(shots)]) <= context:
            text, j = shots[j % len(shots)] + text, j + 1
        prompts.append(policy.encode(text))
    return prompts


def generation_table(policy, batch: int, contexts: list[int], max_new_tokens: int, repeats: int) -> None:
    print(f"\ngeneration with and without the block KV cache, batch {batch}, greedy, "
          f"max {max_new_tokens} new tokens, block {policy.block_size}, sub-block {policy.sub_block}; "
          f"ratio = cached / uncached tokens/s")
    print(f"{'prompt':>7} {'new tok':>8} {'cached tok/s':>13} {'uncached tok/s':>15} {'ratio':>7} "
          f"{'cached fwd tok':>15} {'uncached fwd tok':>17}")
    for context in contexts:
        prompts = few_shot_prompts(policy, batch, context)
        config = SamplerConfig(max_new_tokens=max_new_tokens)
        cached_s, cached = timed(lambda: generate(policy, prompts, config, seed=0), repeats)
        uncached_s, uncached = timed(lambda: generate(policy, prompts, SamplerConfig(max_new_tokens=max_new_tokens,
                                                                                    use_cache=False), seed=0), repeats)
        assert cached.tokens == uncached.tokens, "cached and uncached generation differ"
        new = sum(len(t) for t in cached.tokens)
        mean_prompt = sum(map(len, prompts)) / len(prompts)
        print(f"{mean_prompt:>7.0f} {new:>8} {new / cached_s:>13.0f} {new / uncached_s:>15.0f} "
              f"{uncached_s / cached_s:>6.2f}x {cached.forward_tokens:>15} {uncached.forward_tokens:>17}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "random"], default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    policy = load(args.model)
    print(f"model {args.model} ({sum(p.numel() for p in policy.model.parameters()):,} parameters), "
          f"{torch.get_num_threads()} torch threads, times: median of {args.repeats}")
    generation_table(policy, args.batch, [8, 64, 256], args.max_new_tokens, args.repeats)
    scoring_table(policy, args.batch, [32, 128, 512], args.repeats)


if __name__ == "__main__":
    main()
