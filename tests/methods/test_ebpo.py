"""The ``ebpo`` estimator against the exact oracle: unbiased for each block's sub-block-chain ELBO, a lower bound in
expectation, one level per stratum, and the silent-bug properties (first-token shift, in-block shift, no leakage).

Statistical tests use the z statistic of ``test_likelihood`` (|z| < 4.5 over R independent mask keys, one row
each; power checks demand |z| > 8). Geometries: ``tiny_policy`` (blocks of 4, sub-blocks of 2), the same with
whole blocks (sub-block 4: EBPO as published, no sub-blocks) and ``block8`` (blocks of 8, sub-blocks of 4).
"""
import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from arena.model.sampler import SamplerConfig, generate
from methods.likelihood import ScoringBatch, estimate, sequence_logprob, stratified_levels
from methods.oracle import completion_blocks
from test_likelihood import COMPLETION, POWER_Z, PROMPT, Z_LIMIT, oracle_blocks, repeated, z_scores

REPEATS = 1500
GEOMETRIES = {"tiny": (4, 2), "whole": (4, 4), "block8": (8, 4)}  # (block, sub-block)


def geometry(tiny_policy, name):
    block, sub_block = GEOMETRIES[name]
    return dataclasses.replace(tiny_policy, block_size=block, sub_block=sub_block)


def brute_force_expectation(part) -> float:
    """E over the level t ~ U[0, 1) and the mask of one sub-block's term: l(t) = floor(t m) + 1 takes each value of
    {1..m} on an interval of length 1/m, and M is every l-subset with equal weight; each term (m/l) S(M)."""
    m, total = len(part.masked), 0.0
    for size in range(1, m + 1):
        subsets = list(itertools.combinations(part.masked, size))
        for subset in subsets:
            visible = frozenset(part.masked) - frozenset(subset)
            total += (1 / m) * (m / size) * sum(part.cond[visible][i] for i in subset) / len(subsets)
    return total


@pytest.mark.parametrize("name", GEOMETRIES)
def test_ebpo_is_unbiased_for_each_blocks_elbo(tiny_policy, name):
    """E[ebpo] per block = first-token term + Σ_s E_{t, M}[(m_s/l) S_s(M)], enumerated over levels and masks, which is
    the analytic sub-block-chain ELBO (the oracle's Beta-weighted sum over masks: an independent computation).
    The estimator's mean over 1500 keys is within 4.5 standard errors (sample SD / sqrt(1500)) of it."""
    policy = geometry(tiny_policy, name)
    blocks = oracle_blocks(policy)
    brute = np.array([block.first + sum(brute_force_expectation(part) for part in block.parts) for block in blocks])
    np.testing.assert_allclose(brute, [block.elbo for block in blocks], rtol=1e-9)
    samples = repeated(policy, "ebpo", {}, REPEATS)
    assert np.all(np.abs(z_scores(samples, brute)) < Z_LIMIT), (samples.mean(0), brute)
    if name == "tiny":  # power: the whole-block ELBO (what ignoring the sampler's sub-blocks would target) is rejected
        whole = np.array([block.elbo for block in oracle_blocks(policy, sub_block=4)])
        assert np.abs(z_scores(samples, whole)).max() > POWER_Z, (samples.mean(0), whole)


@pytest.mark.parametrize("name", GEOMETRIES)
def test_ebpo_is_a_lower_bound_in_expectation(tiny_policy, name):
    """Per block and summed over the sequence, the mean over 1500 keys lies below the exact log-likelihood of the
    sampler (random order, sub-block chain; the oracle's dynamic programme over unmasking orders), up to 4.5 standard
    errors; and in some block it lies detectably below (the bound is strict there, so the check sees direction)."""
    policy = geometry(tiny_policy, name)
    exact = np.array([block.exact for block in oracle_blocks(policy)])
    samples = repeated(policy, "ebpo", {}, REPEATS)
    z = z_scores(samples, exact)
    assert np.all(z < Z_LIMIT), z
    assert z.min() < -POWER_Z, z
    assert z_scores(samples.sum(1, keepdims=True), exact.sum(keepdims=True))[0] < -POWER_Z


def test_stratified_levels_fall_one_in_each_stratum():
    """Against exact rational arithmetic: the j-th active block of a row gets frac(u + j/N), the N levels one in each
    of [c/N, (c+1)/N), inactive blocks 0; rows of 1 to 5 active blocks, with inactive ones before, between, after."""
    active = torch.tensor([[0, 1, 1, 1, 0], [1, 0, 0, 0, 0], [0, 0, 1, 0, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]).bool()
    offsets = torch.tensor([0.0, 0.37, 0.999999, 0.5, 0.8125], dtype=torch.float32)
    levels = stratified_levels(active, offsets)
    for row in range(len(active)):
        u, on = Fraction(float(offsets[row])), active[row].nonzero().flatten().tolist()
        N = len(on)
        for j, block in enumerate(on):
            exact = (u + Fraction(j, N)) % 1
            assert float(levels[row, block]) == pytest.approx(float(exact), abs=1e-12)
        assert sorted(math.floor(float(levels[row, b]) * N) for b in on) == list(range(N))
        assert all(float(levels[row, b]) == 0.0 for b in range(active.shape[1]) if b not in on)


def test_the_masks_of_a_sequence_cover_the_strata(tiny_policy):
    """Three whole blocks of 3 denoised positions (N = m = 3): the count l = floor(3t) + 1 is the level's stratum + 1,
    so in every row the blocks mask 1, 2 and 3 positions in some order, and over 900 keys each block masks each
    count a third of the time (|z| < 4.5). Independent levels (``elbo``, one draw) fail the first check."""
    R = 900
    batch = ScoringBatch.build([[5, 6, 7, 8]] * R, [COMPLETION[:3] + [31] + COMPLETION[3:11]] * R,
                               tiny_policy.pad_id, 4, sample_ids=range(R), sub_block=4)
    with torch.no_grad():
        counts = estimate("ebpo", tiny_policy, batch, (0, 0, 0)).masks[:, 0].reshape(R, -1, 4).sum(-1)[:, 1:]
        independent = estimate("elbo", tiny_policy, batch, (0, 0, 0), draws=1).masks[:, 0].reshape(R, -1, 4).sum(-1)
    assert (counts.sort(-1).values == torch.tensor([1, 2, 3])).all()
    assert not (independent[:, 1:].sort(-1).values == torch.tensor([1, 2, 3])).all()
    for block in range(3):
        for count in (1, 2, 3):
            share = float((counts[:, block] == count).double().mean())
            assert abs(share - 1 / 3) < Z_LIMIT * math.sqrt(2 / 9 / R), (block, count, share)


@pytest.mark.parametrize("name", GEOMETRIES)
def test_one_draw_is_the_oracles_value_of_its_own_masks(tiny_policy, name):
    """Shift and views, draw for draw: each block's estimate is first-token term + Σ_s (m_s/|M_s|) Σ_{i∈M_s}
    log p(y_i | prefix, the sub-block's other positions visible, later sub-blocks masked), with the oracle's
    conditionals (its own attention mask written by loops) at the masks the estimator drew. Rows of three prompt
    lengths, a temperature."""
    policy = geometry(tiny_policy, name)
    B, S = policy.block_size, policy.sub_block
    prompts = [PROMPT, [3, 4, 5, 6, 7, 8, 9, 10, 11], [12, 13]]
    completions = [COMPLETION, COMPLETION[:7], COMPLETION[:6]]
    batch = ScoringBatch.build(prompts, completions, policy.pad_id, B, 0.9, sample_ids=[4, 9, 2])
    with torch.no_grad():
        est = estimate("ebpo", policy, batch, (3, 1, 2))
    checked = 0
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        for block in completion_blocks(policy, prompt, completion, temperature=0.9, sub_block=S):
            mask = est.masks[row, 0, block.index * B : (block.index + 1) * B].tolist()
            expected = block.first
            for part in block.parts:
                drawn = [i for i in part.masked if mask[i]]
                assert drawn and not any(mask[i] for i in range(B) if i // S == part.masked[0] // S
                                         and i not in part.masked)
                visible = frozenset(part.masked) - frozenset(drawn)
                expected += len(part.masked) / len(drawn) * sum(part.cond[visible][i] for i in drawn)
            assert float(est.logp[row, block.index]) == pytest.approx(expected, abs=1e-4), (row, block.index)
            checked += 1
    assert checked == int(est.units.sum()) >= 4


def test_first_token_term_is_the_samplers_log_softmax(tiny_policy):
    """The boundary shift: the AR first token of each block is scored exactly as the sampler drew it."""
    prompts = [PROMPT, [3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]
    out = generate(tiny_policy, prompts, SamplerConfig(max_new_tokens=9, temperature=0.8), seed=4)
    batch = ScoringBatch.build(prompts, out.tokens, tiny_policy.pad_id, 4, 0.8)
    with torch.no_grad():
        first = estimate("ebpo", tiny_policy, batch, (0, 0, 0)).first_token_logp
    gaps = [abs(float(first[row, (len(prompt) + index) // 4]) - math.log(prob))
            for row, (prompt, probs) in enumerate(zip(prompts, out.probs))
            for index, prob in enumerate(probs) if (len(prompt) + index) % 4 == 0]
    assert len(gaps) >= 6 and max(gaps) < 1e-4


def test_no_block_sees_a_later_block(tiny_policy):
    """Changing the tokens of the last block (same lengths, so the same levels and masks) leaves every earlier
    block's estimate as it was and changes the last one's."""
    changed = COMPLETION[:-3] + [40, 41, 42]
    batch = ScoringBatch.build([PROMPT, PROMPT], [COMPLETION, changed], tiny_policy.pad_id, 4, sample_ids=[5, 5])
    with torch.no_grad():
        est = estimate("ebpo", tiny_policy, batch, (0, 1, 0))
    assert torch.equal(est.masks[0], est.masks[1])
    torch.testing.assert_close(est.logp[0, :-1], est.logp[1, :-1], rtol=0, atol=1e-5)
    assert abs(float(est.logp[0, -1] - est.logp[1, -1])) > 1e-2


def log_variance_z(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """z of log var(a) - log var(b) over the first axis, each log variance's standard error from its sample kurtosis
    (delta method: Var(log s²) ≈ (m4/s⁴ - 1)/R), the two treated as independent (they share order keys, correlated
    positively, so this overstates the error: conservative)."""
    def log_var(x):
        x = x - x.mean(0)
        return np.log(x.var(0, ddof=1)), ((x**4).mean(0) / (x**2).mean(0) ** 2 - 1) / len(x)
    (la, va), (lb, vb) = log_var(a), log_var(b)
    return (la - lb) / np.sqrt(va + vb)


@pytest.mark.parametrize("name", ["tiny", "whole"])
def test_stratification_lowers_the_variance_of_the_sequence_sum(tiny_policy, name):
    """Over 1500 keys, the variance of the sequence's sum (3 blocks) is lower for ebpo than for the 1-draw count-form
    elbo (independent levels): z < -4.5 (measured: variance ratio 0.62 with sub-blocks of 2, 0.74 with whole blocks).
    With whole blocks one block's ebpo estimate has exactly the 1-draw elbo's law, so there the per-block variances
    agree (|z| < 4.5). A property of this model's conditionals (the blocks' level curves are alike), measured here."""
    policy = geometry(tiny_policy, name)
    ebpo, elbo = (repeated(policy, estimator, options, REPEATS)
                  for estimator, options in (("ebpo", {}), ("elbo", {"draws": 1})))
    assert log_variance_z(ebpo.sum(1), elbo.sum(1)) < -Z_LIMIT
    if name == "whole":
        assert np.all(np.abs(log_variance_z(ebpo, elbo)) < Z_LIMIT)


def test_the_sequence_value_is_the_sum_of_its_blocks(tiny_policy):
    batch = ScoringBatch.build([PROMPT], [COMPLETION], tiny_policy.pad_id, 4)
    with torch.no_grad():
        est = estimate("ebpo", tiny_policy, batch, (0, 0, 0))
    assert float(sequence_logprob(est)[0]) == pytest.approx(float(est.logp[0, est.units[0]].sum()), abs=1e-5)
    assert torch.equal(est.draw_values[:, 0], est.logp) and est.masks.shape[1] == 1
