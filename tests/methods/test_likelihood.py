"""Each estimator computes the quantity it claims: DESIGN §4 properties 1-7 against the exact oracle.

Statistical tests use z = (mean - target) / (sd / sqrt(R)) over R independent mask keys (one batch row each) and fail at
|z| > 4.5: with about 20 such comparisons in this file, the chance of a false alarm is below 2e-4.
"""
import dataclasses
import math

import numpy as np
import pytest
import torch

from arena.model.sampler import SamplerConfig, generate
from methods.likelihood import ESTIMATORS, ScoringBatch, estimate, gauss_legendre_nodes, sequence_logprob
from methods.oracle import analytic_elbo, completion_blocks, conditionals, next_token_logprobs

Z_LIMIT = 4.5
PROMPT = [5, 6, 7, 8, 9]  # length 5: block 1 holds the prompt tail (one token) and 3 denoised positions
COMPLETION = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]  # ends at 16: blocks 1, 2, 3


def batch_for(policy, prompt=PROMPT, completion=COMPLETION, temperature=1.0):
    return ScoringBatch.build([prompt], [completion], policy.pad_id, policy.block_size, temperature)


def oracle_blocks(policy):
    return list(completion_blocks(policy, PROMPT, COMPLETION))


def repeated(policy, name, options, repeats):
    """(repeats, blocks) estimates of one sequence under independent mask keys (one row per sample id)."""
    batch = ScoringBatch.build([PROMPT] * repeats, [COMPLETION] * repeats, policy.pad_id, policy.block_size,
                               sample_ids=range(repeats))
    with torch.no_grad():
        values = estimate(name, policy, batch, (0, 0, 0), **options).logp
    return values[:, len(PROMPT) // policy.block_size :].double().numpy()


def z_scores(samples: np.ndarray, target: np.ndarray) -> np.ndarray:
    spread = samples.std(0, ddof=1)
    return np.where(spread > 0, (samples.mean(0) - target) / (spread / math.sqrt(len(samples)) + 1e-300), 0.0)


def test_block_size_one_equals_ar(tiny_policy):
    """Property 1: with one-token blocks every token is an AR step; all block estimators equal ar."""
    policy = dataclasses.replace(tiny_policy, block_size=1)
    batch = batch_for(policy)
    with torch.no_grad():
        exact = sequence_logprob(estimate("ar", policy, batch, (0, 0, 0)))
        for name in ("masked", "elbo", "gauss_legendre"):
            got = sequence_logprob(estimate(name, policy, batch, (0, 0, 0)))
            torch.testing.assert_close(got, exact, rtol=0, atol=1e-5)


def test_ar_is_the_causal_language_model_likelihood(tiny_policy):
    full = torch.tensor([PROMPT + COMPLETION])
    with torch.no_grad():
        logits = tiny_policy.model(input_ids=full).logits  # transformers' own causal attention
        expected = torch.log_softmax(logits[0, :-1], -1).gather(-1, full[0, 1:, None]).squeeze(-1)[len(PROMPT) - 1 :].sum()
        got = sequence_logprob(estimate("ar", tiny_policy, batch_for(tiny_policy), (0, 0, 0)))
    assert float(got) == pytest.approx(float(expected), abs=1e-4)


def test_d1_masks_whole_completion_and_prompt_at_rate(tiny_policy):
    prompts = [list(range(4, 60))] * 8
    batch = ScoringBatch.build(prompts, [COMPLETION] * 8, tiny_policy.pad_id, 4, sample_ids=range(8))
    with torch.no_grad():
        est = estimate("d1", tiny_policy, batch, (0, 0, 0), p_mask=0.25)
    masks = est.masks[:, 0]
    assert masks[batch.completion].all()
    rate = masks[batch.valid & ~batch.completion].float().mean().item()
    assert abs(rate - 0.25) < 4.5 * math.sqrt(0.25 * 0.75 / (8 * 56))
    # oracle: one forward of the noisy sequence with the model's own block-causal attention
    noisy = torch.where(masks[:1], tiny_policy.mask_id, batch.ids[:1])[:, : len(prompts[0]) + len(COMPLETION)]
    logp = next_token_logprobs(tiny_policy, noisy)
    start = len(prompts[0])
    expected = sum(float(logp[0, j - 1, batch.ids[0, j]]) for j in range(start, start + len(COMPLETION)))
    assert float(sequence_logprob(est)[0]) == pytest.approx(expected, abs=1e-4)


def test_block_masked_equals_per_block_oracle(tiny_policy):
    """Property 2: the packed single forward equals each block scored on its own."""
    with torch.no_grad():
        got = estimate("masked", tiny_policy, batch_for(tiny_policy), (0, 0, 0)).logp[0, 1:]
    for value, block in zip(got.tolist(), oracle_blocks(tiny_policy)):
        assert value == pytest.approx(block.first + sum(block.cond[frozenset()].values()), abs=1e-4)


def test_first_token_term_is_the_samplers_log_softmax(tiny_policy):
    """Property 3: the AR first token of each block, scored exactly as the sampler drew it."""
    prompts = [PROMPT, [3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]
    temperature = 0.8
    out = generate(tiny_policy, prompts, SamplerConfig(max_new_tokens=9, temperature=temperature), seed=4)
    batch = ScoringBatch.build(prompts, out.tokens, tiny_policy.pad_id, 4, temperature)
    with torch.no_grad():
        first = estimate("elbo", tiny_policy, batch, (0, 0, 0)).first_token_logp
    checked = 0
    for row, (prompt, probs) in enumerate(zip(prompts, out.probs)):
        for index, prob in enumerate(probs):
            position = len(prompt) + index
            if position % 4 == 0:
                assert float(first[row, position // 4]) == pytest.approx(math.log(prob), abs=1e-4)
                checked += 1
    assert checked >= 6


@pytest.mark.parametrize("options", [
    {"form": "uniform"}, {"form": "count"}, {"form": "uniform", "antithetic": True}, {"form": "count", "antithetic": True},
])
def test_monte_carlo_elbo_is_unbiased(tiny_policy, options):
    """Property 4a: E[MC ELBO] = analytic ELBO (z-test over 1000 independent keys)."""
    samples = repeated(tiny_policy, "elbo", {"draws": 2, **options}, 1000)
    target = np.array([block.elbo for block in oracle_blocks(tiny_policy)])
    assert np.all(np.abs(z_scores(samples, target)) < Z_LIMIT), (samples.mean(0), target)


def test_analytic_elbo_is_a_lower_bound_and_log_of_sum_is_caught(tiny_policy):
    """Property 4b: ELBO <= exact log-lik. A log-of-sum where the sum-of-logs belongs breaks it."""
    blocks = oracle_blocks(tiny_policy)
    for block in blocks:
        assert block.inner_elbo <= block.inner_exact + 1e-9
    # The plausible neighbour: log E_(l,M)[exp((m/l) S(M))] in place of E[(m/l) S(M)] (count form).
    wrong = []
    for block in blocks:
        cond, masked, exact = block.cond, block.masked, block.inner_exact
        m, mixture = len(masked), 0.0
        for l in range(1, m + 1):
            subsets = [s for s in cond if len(s) == m - l]
            for visible in subsets:
                score = sum(cond[visible].values())
                mixture += math.exp(m / l * score) / (m * len(subsets))
        wrong.append(math.log(mixture) > exact)
    assert any(wrong), "the bound check would not catch a log-of-sum"


def test_gauss_legendre_quadrature_of_the_exact_integrand(tiny_policy):
    """Property 5a: f(t) = (1/t) E_{M~Bern(t)}[S(M)] of a 7-position block (block size 8), enumerated.

    f has degree m-1 = 6, so 4 nodes integrate it exactly; with fewer, the error shrinks with n.
    """
    policy = dataclasses.replace(tiny_policy, block_size=8)
    masked = list(range(1, 8))
    cond = conditionals(policy, [5, 6, 7, 8, 9, 10, 11, 12], [13, 20, 21, 22, 23, 24, 25, 26], masked)
    analytic = analytic_elbo(cond, masked)

    def f(t):
        total = 0.0
        for visible, logps in cond.items():
            size = len(masked) - len(visible)
            total += t**size * (1 - t) ** (len(masked) - size) * sum(logps.values())
        return total / t

    errors = [abs(sum(w * f(t) for t, w in zip(*gauss_legendre_nodes(n))) - analytic) for n in range(1, 5)]
    assert errors[0] > errors[1] > errors[2] > 1e-7
    assert errors[3] < 1e-9 * abs(analytic)


def test_gauss_legendre_estimator_is_unbiased_at_enough_nodes(tiny_policy):
    """Property 5b: one mask per node, n = ceil(m/2) = 2 nodes: unbiased for the analytic ELBO."""
    samples = repeated(tiny_policy, "gauss_legendre", {"nodes": 2}, 1000)
    target = np.array([block.elbo for block in oracle_blocks(tiny_policy)])
    assert np.all(np.abs(z_scores(samples, target)) < Z_LIMIT), (samples.mean(0), target)


def test_masks_are_keyed(tiny_policy):
    """Property 6: masks differ across inner iterations, samples and draws; same key, same masks."""
    batch = ScoringBatch.build([PROMPT] * 2, [COMPLETION] * 2, tiny_policy.pad_id, 4, sample_ids=[0, 1])
    for name, options in (("elbo", {"draws": 2}), ("gauss_legendre", {"nodes": 2}), ("d1", {})):
        with torch.no_grad():
            first = estimate(name, tiny_policy, batch, (1, 2, 0), **options).masks
            again = estimate(name, tiny_policy, batch, (1, 2, 0), **options).masks
            other = estimate(name, tiny_policy, batch, (1, 2, 1), **options).masks
        assert torch.equal(first, again)
        assert not torch.equal(first, other)
        if name != "d1":
            assert not torch.equal(first[0], first[1])  # samples
            assert not torch.equal(first[:, 0], first[:, 1])  # draws


def test_every_estimator_is_differentiable(tiny_policy):
    batch = batch_for(tiny_policy)
    for name in ESTIMATORS:
        tiny_policy.model.zero_grad()
        sequence_logprob(estimate(name, tiny_policy, batch, (0, 0, 0))).sum().backward()
        grads = [p.grad for p in tiny_policy.model.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads), name
    tiny_policy.model.zero_grad()
