"""The sampler against independent oracles: uncached decoding, single rows, the scorer, enumeration."""
import dataclasses
import math
from collections import Counter

import pytest
import torch
from scipy import stats

from arena.model.sampler import SamplerConfig, draw, generate
from conftest import StopShifted
from methods.oracle import next_token_logprobs, sub_block_chains

PROMPTS = [[5, 6, 7], [9, 10, 11, 12], [13] * 8, [20, 21, 22, 23, 24], [30], [40, 41, 42, 43, 44, 45, 46]]
# prompt lengths 3, 4 (= block), 8 (multiple of the block), 5, 1, 7: every alignment case


def test_cached_equals_uncached(tiny_policy):
    for temperature in (0.0, 1.0):
        config = SamplerConfig(max_new_tokens=10, temperature=temperature)
        cached = generate(tiny_policy, PROMPTS, config, seed=3)
        uncached = generate(tiny_policy, PROMPTS, dataclasses.replace(config, use_cache=False), seed=3)
        assert cached.tokens == uncached.tokens
        assert cached.steps == uncached.steps
        assert cached.forward_tokens < uncached.forward_tokens


@pytest.mark.slow
def test_batch_equals_rows_alone(tiny_policy):
    # temperature > 0 with batch > 1 crashed Fast-dLLM v2 (issue #64); random order reads each row's second uniforms
    for temperature, order in ((0.0, "confidence"), (0.8, "confidence"), (1.0, "random")):
        config = SamplerConfig(max_new_tokens=9, temperature=temperature, threshold=0.3, order=order)
        batch = generate(tiny_policy, PROMPTS, config, seed=11)
        for row, prompt in enumerate(PROMPTS):
            alone = generate(tiny_policy, [prompt], config, seed=11, row_ids=[row])
            assert alone.tokens[0] == batch.tokens[row]
            assert alone.probs[0] == pytest.approx(batch.probs[row], rel=1e-5)


def test_seeds_reproduce_and_differ(tiny_policy):
    config = SamplerConfig(max_new_tokens=12, temperature=1.0)
    a, b, c = (generate(tiny_policy, PROMPTS, config, seed=s) for s in (1, 1, 2))
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens


def test_completions_cover_whole_blocks(tiny_policy):
    out = generate(tiny_policy, PROMPTS, SamplerConfig(max_new_tokens=6), seed=0)
    for prompt, tokens in zip(PROMPTS, out.tokens):
        assert (len(prompt) + len(tokens)) % tiny_policy.block_size == 0
        assert len(tokens) >= 6


def scorer_probability(policy, prompt, tokens, steps, index, temperature):
    """The scorer's probability of completion token ``index`` under the conditioning it was drawn in.

    Block starts: the clean sequence up to the previous block. Other positions: their block with the
    prompt tail, the block's first token and every token decoded at an earlier step visible.
    """
    B = policy.block_size
    full = prompt + tokens
    j = len(prompt) + index
    k = j // B
    if j % B == 0:
        return math.exp(next_token_logprobs(policy, torch.tensor([full[:j]]), temperature)[0, j - 1, full[j]])
    noisy = []
    for position in range(k * B, (k + 1) * B):
        c = position - len(prompt)
        visible = c < 0 or position % B == 0 or steps[c] < steps[index]
        noisy.append(full[position] if visible else policy.mask_id)
    sequence = torch.tensor([full[: k * B] + noisy])
    return math.exp(next_token_logprobs(policy, sequence, temperature)[0, j - 1, full[j]])


@pytest.mark.parametrize("temperature,threshold,sub_block", [(1.0, 1.0, 2), (0.7, 0.2, 2), (1.3, 1.0, 4), (0.0, 0.5, 2)])
def test_sampler_probability_equals_scorer(tiny_policy, temperature, threshold, sub_block):
    config = SamplerConfig(max_new_tokens=9, temperature=temperature, threshold=threshold, sub_block=sub_block)
    out = generate(tiny_policy, PROMPTS, config, seed=5)
    scorer_temperature = temperature or 1.0  # greedy rows report the untempered probability
    first_tokens = 0
    for prompt, tokens, steps, probs in zip(PROMPTS, out.tokens, out.steps, out.probs):
        for index in range(len(tokens)):
            first_tokens += (len(prompt) + index) % tiny_policy.block_size == 0
            expected = scorer_probability(tiny_policy, prompt, tokens, steps, index, scorer_temperature)
            assert probs[index] == pytest.approx(expected, rel=1e-4, abs=1e-7), (prompt, index)
    assert first_tokens >= len(PROMPTS)  # the AR-shift boundary was exercised


def test_parallel_unmasking_decodes_several_tokens_per_step(tiny_policy):
    one = generate(tiny_policy, PROMPTS, SamplerConfig(max_new_tokens=16, threshold=1.0, sub_block=4), seed=0)
    many = generate(tiny_policy, PROMPTS, SamplerConfig(max_new_tokens=16, threshold=0.0, sub_block=4), seed=0)
    assert many.forward_tokens < one.forward_tokens
    assert any(len(set(s)) < len(s) for s in many.steps)


def test_stop_token_ends_each_row(tiny_policy):
    out = generate(StopShifted(tiny_policy, 40.0), PROMPTS, SamplerConfig(max_new_tokens=40), seed=0)
    for prompt, tokens, length in zip(PROMPTS, out.tokens, out.lengths):
        assert tokens[length - 1] == tiny_policy.eos_id
        assert tiny_policy.eos_id not in tokens[: length - 1]
        assert len(prompt) + len(tokens) <= (len(prompt) // 4 + 2) * 4  # stopped within a block or two


def test_top_p_draw_against_brute_force():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 10, generator=generator) * 2
    uniforms = torch.rand(64, generator=generator)
    tokens, probs = draw(logits, torch.full((64,), 0.9), 0.6, uniforms)
    for row in range(64):
        p = torch.softmax(logits[row] / 0.9, -1)
        order = p.argsort(descending=True).tolist()
        nucleus, mass = [], 0.0
        for t in order:
            nucleus.append(t)
            mass += float(p[t])
            if mass >= 0.6:
                break
        assert int(tokens[row]) in nucleus
        assert float(probs[row]) == pytest.approx(float(p[tokens[row]]) / sum(float(p[t]) for t in nucleus), rel=1e-5)


SUB_PROMPT, SUB_SAMPLES = [3, 5, 6, 4, 7], 6000
OUTCOMES = [(a, b, c) for a in range(8) for b in range(8) for c in range(8)]


@pytest.fixture(scope="module")
def sub_block_oracle(small_vocab_policy):
    """Block 4 after the prompt [3, 5, 6, 4 | 7]: position 0 holds the prompt tail, sub-block 0 one denoised
    position (1), sub-block 1 two (2, 3). Per outcome: the sub-block chain (sub-block 2) and the whole block."""
    blocks = [[SUB_PROMPT[4], *outcome] for outcome in OUTCOMES]
    chain = sub_block_chains(small_vocab_policy, SUB_PROMPT[:4], blocks, [1, 2, 3], sub_block=2)
    whole = sub_block_chains(small_vocab_policy, SUB_PROMPT[:4], blocks, [1, 2, 3], sub_block=4)
    return chain, whole


def chi_square_pvalue(counts: dict, logprob: dict, n: int) -> float:
    """Pearson chi-square of observed outcome counts against n·exp(logprob), outcomes expected < 5 pooled."""
    expected = {o: n * math.exp(v) for o, v in logprob.items()}
    big = [o for o, e in expected.items() if e >= 5]
    observed = [counts.get(o, 0) for o in big] + [n - sum(counts.get(o, 0) for o in big)]
    predicted = [expected[o] for o in big] + [n - sum(expected[o] for o in big)]
    assert len(big) >= 20
    return stats.chisquare(observed, predicted).pvalue


def sampled_blocks(policy, sub_block: int) -> dict[tuple, int]:
    """How often each block comes out of SUB_SAMPLES random-order decodings of SUB_PROMPT."""
    config = SamplerConfig(max_new_tokens=3, temperature=1.0, order="random", sub_block=sub_block)
    out = generate(policy, [SUB_PROMPT] * SUB_SAMPLES, config, seed=17, row_ids=list(range(SUB_SAMPLES)))
    return dict(Counter(tuple(tokens) for tokens in out.tokens))


def test_random_order_block_frequencies_match_exact_likelihood(small_vocab_policy, sub_block_oracle):
    """Chi-square: sampled blocks vs exp(exact log-lik), enumerated over all unmasking orders (sub-block = block).

    Block 4, prompt of 5 tokens: the prompt tail fills position 0 of the generation block and the
    three others are sampled, so there are 8^3 = 512 outcomes. The test fails when p < 1e-3
    (false-alarm rate 0.1%).
    """
    _, whole = sub_block_oracle
    counts = sampled_blocks(small_vocab_policy, sub_block=4)
    whole_logp = {o: parts[0].exact for o, parts in zip(OUTCOMES, whole)}
    assert sum(math.exp(v) for v in whole_logp.values()) == pytest.approx(1.0, rel=1e-6)  # the oracle is a distribution
    assert chi_square_pvalue(counts, whole_logp, SUB_SAMPLES) > 1e-3


def test_random_order_with_sub_blocks_matches_the_sub_block_chain(small_vocab_policy, sub_block_oracle):
    """Property 7 with sub-block 2 < block 4: frequencies of 6000 sampled blocks match the exact sub-block-chain
    likelihood Σ_s log p(sub-block s | earlier clean, later masked), enumerated (p > 1e-3), and the same
    test rejects the whole-block random-order likelihood (p < 1e-6): it has the power to tell them apart."""
    chain, whole = sub_block_oracle
    counts = sampled_blocks(small_vocab_policy, sub_block=2)
    chain_logp = {o: sum(part.exact for part in parts) for o, parts in zip(OUTCOMES, chain)}
    whole_logp = {o: parts[0].exact for o, parts in zip(OUTCOMES, whole)}
    for logp in (chain_logp, whole_logp):  # each oracle is a distribution over the 512 blocks
        assert sum(math.exp(v) for v in logp.values()) == pytest.approx(1.0, rel=1e-6)
    assert chi_square_pvalue(counts, chain_logp, SUB_SAMPLES) > 1e-3
    assert chi_square_pvalue(counts, whole_logp, SUB_SAMPLES) < 1e-6


def test_sub_block_elbo_bounds_the_sub_block_chain_for_every_block(sub_block_oracle):
    """For every one of the 512 blocks: the analytic sub-block ELBO <= the exact sub-block-chain log-lik, per
    sub-block and in sum. The whole-block ELBO, the estimators' target before sub-blocks, exceeds the sampler's
    log-lik for some blocks: the bound test has the power to catch a whole-block estimator."""
    chain, whole = sub_block_oracle
    above = 0
    for parts, (whole_part,) in zip(chain, whole):
        assert [part.masked for part in parts] == [[1], [2, 3]] and parts[0].held == [2, 3]
        for part in parts:
            assert part.elbo <= part.exact + 1e-9
        above += whole_part.elbo > sum(part.exact for part in parts) + 1e-6
    assert above >= 10, above
