"""Rollout diagnostics (methods.diagnostics): group collapse and tokens per forward against cases whose answer is
known, and the step maps a GRPO step hands the runner."""
import numpy as np

from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import build_policy
from arena.rng import seed_of
from conftest import SMALL, digit_share, sharpen
from methods import diagnostics
from methods.base import make_method

G = 4


def group_stats(policy, prompt: list[int], **sampler) -> tuple[list, dict]:
    """One group of G completions of ``prompt`` (rows keyed 0..G-1, as a GRPO step keys them) and its diagnostics."""
    config = SamplerConfig(**{"max_new_tokens": 12, **sampler})
    out = generate(policy, [prompt] * G, config, seed=5, row_ids=list(range(G)))
    sums = diagnostics.decoding_sums(out, G, config.max_new_tokens)
    return out, diagnostics.decoding_stats(sums, G, config.max_new_tokens)


def test_identical_completions_by_hand():
    texts = [[1, 2], [1, 2], [3], [4], [5], [5], [5], [6, 5]]  # two groups of 4
    assert diagnostics.identical_completions(texts, 4) == 2 + 3
    assert diagnostics.identical_completions(texts, 2) == 2 + 2  # groups (1 2, 1 2), (3, 4), (5, 5), (5, 6 5)


def test_temperature_zero_gives_one_completion_per_group_and_temperature_one_distinct_ones(tiny_policy):
    greedy, collapsed = group_stats(tiny_policy, [5, 6, 7], temperature=0.0)
    assert len({tuple(t) for t in greedy.tokens}) == 1 and collapsed["identical_share"] == 1.0
    sampled, spread = group_stats(tiny_policy, [5, 6, 7], temperature=1.0)
    assert len({tuple(t) for t in sampled.tokens}) == G and spread["identical_share"] == 0.0


def test_tokens_per_forward_is_one_at_threshold_one_and_a_whole_sub_block_at_a_tiny_threshold(tiny_policy):
    """A 4-token prompt fills block 0: every later block of 4 (sub-blocks of 2) takes its first token alone from the
    previous forward, then one forward for the rest of sub-block 0 and, at a tiny threshold, one for all of
    sub-block 1: 4 tokens in 3 forwards, whether a row stops after one block or two."""
    _, one = group_stats(tiny_policy, [9, 10, 11, 12], temperature=0.0, threshold=1.0)
    assert one["tokens_per_forward"] == 1.0
    assert {k for k in one if k.startswith("tokens_per_forward_len")} and \
        all(one[k] == 1.0 for k in one if k.startswith("tokens_per_forward"))
    _, parallel = group_stats(tiny_policy, [9, 10, 11, 12], temperature=0.0, threshold=1e-9, max_new_tokens=8)
    assert parallel["tokens_per_forward"] == 4 / 3


def test_length_buckets_are_quarters_of_the_rollout_length():
    assert diagnostics.bucket_names(64) == ["len_upto16", "len_upto32", "len_upto48", "len_upto64", "len_over64"]
    assert diagnostics.bucket_names(2) == ["len_upto1", "len_upto2", "len_over2"]


def test_a_grpo_step_logs_the_diagnostics_and_hands_over_every_rollout_s_step_map():
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("block_grpo", policy, {"group_size": G, "max_new_tokens": 8, "estimator": "elbo"}, seed=0)
    prompts = [policy.encode(p) for p in ("12+7=", "3+4=")]
    result = method.step(prompts, digit_share, 0)
    assert result.stats["tokens_per_forward"] == 1.0  # threshold 1: one token per forward
    assert 0.0 <= result.stats["identical_share"] <= 1.0
    record = diagnostics.merged_records([(3, result.decoding), (4, result.decoding)])
    assert record["step"].tolist() == [3] * 2 * G + [4] * 2 * G
    assert record["prompt"].tolist()[:2 * G] == [0] * G + [1] * G and record["member"].tolist()[:G] == list(range(G))
    # the forward indices of each rollout, as a decoding of the same rows (keyed (seed, step), row) by the untrained
    # policy gives them
    rows = [(i, g) for i in range(2) for g in range(G)]
    again = generate(sharpen(build_policy(SMALL), std=0.1), [prompts[i] for i, _ in rows], method.sampler,
                     seed=seed_of(0, 0), row_ids=[i * G + g for i, g in rows])
    for n, steps in enumerate(again.steps * 2):
        assert record["forward"][record["offsets"][n]: record["offsets"][n + 1]].tolist() == steps
    assert np.array_equal(record["length"], again.lengths * 2)
