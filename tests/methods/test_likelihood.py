"""Each estimator computes the quantity it claims: the seven properties of docs/design.md against the exact oracle.

The block estimators follow the sampler's sub-block chain (docs/design.md, "The estimators"). ``tiny_policy``
decodes sub-blocks of 2 in blocks of 4; ``block8`` (sub-blocks of 4 in blocks of 8) has sub-blocks of up
to 4 denoised positions, so that Gauss-Legendre needs 2 nodes per sub-block where the whole block
would need 4. The oracle targets are the sub-block-chain quantities unless a test says otherwise.

Statistical tests use z = (mean - target) / (sd / sqrt(R)) over R independent mask keys (one batch row each) and fail at
|z| > 4.5: with about 40 such comparisons in this file, the chance of a false alarm is below 3e-4. Power checks
(the same statistic must reject a plausible wrong target) demand |z| > 8.
"""
import dataclasses
import math

import numpy as np
import pytest
import torch

from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import one_thread
from legacy_block_estimators import LEGACY
from methods.likelihood import (BLOCK_ESTIMATORS, ESTIMATORS, ScoringBatch, estimate, gauss_legendre_nodes,
                                sequence_logprob)
from methods.oracle import analytic_elbo, completion_blocks, conditionals, next_token_logprobs

Z_LIMIT = 4.5
POWER_Z = 8.0
PROMPT = [5, 6, 7, 8, 9]  # length 5: block 1 holds the prompt tail (one token) and 3 denoised positions
COMPLETION = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]  # ends at 16: blocks 1, 2, 3 (block 8: blocks 0, 1)
LEFT_TO_RIGHT = list(range(len(COMPLETION)))  # a valid recorded trajectory: one token per step, in order


def batch_for(policy, prompt=PROMPT, completion=COMPLETION, temperature=1.0, steps=None):
    return ScoringBatch.build([prompt], [completion], policy.pad_id, policy.block_size, temperature,
                              steps=None if steps is None else [steps])


@pytest.fixture(scope="module")
def block8(tiny_policy):
    """Sub-blocks of 4 in blocks of 8: block 0 holds the prompt tail and 3 denoised positions in sub-block 1,
    block 1 has 3 denoised positions in sub-block 0 and 4 in sub-block 1."""
    return dataclasses.replace(tiny_policy, block_size=8, sub_block=4)


def oracle_blocks(policy, sub_block=None):
    return list(completion_blocks(policy, PROMPT, COMPLETION, sub_block=sub_block))


def repeated(policy, name, options, repeats, sub_block=None):
    """(repeats, blocks) estimates of one sequence under independent mask keys (one row per sample id)."""
    batch = ScoringBatch.build([PROMPT] * repeats, [COMPLETION] * repeats, policy.pad_id, policy.block_size,
                               sample_ids=range(repeats), sub_block=sub_block)
    with torch.no_grad():
        values = estimate(name, policy, batch, (0, 0, 0), **options).logp
    return values[:, len(PROMPT) // policy.block_size :].double().numpy()


def z_scores(samples: np.ndarray, target: np.ndarray) -> np.ndarray:
    spread = samples.std(0, ddof=1)
    return np.where(spread > 0, (samples.mean(0) - target) / (spread / math.sqrt(len(samples)) + 1e-300), 0.0)


def test_block_size_one_equals_ar(tiny_policy):
    """Property 1: with one-token blocks every token is an AR step; all block estimators equal ar."""
    policy = dataclasses.replace(tiny_policy, block_size=1, sub_block=1)
    batch = batch_for(policy, steps=LEFT_TO_RIGHT)
    with torch.no_grad():
        exact = sequence_logprob(estimate("ar", policy, batch, (0, 0, 0)))
        for name in BLOCK_ESTIMATORS:
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


@pytest.mark.parametrize("sub_block", [2, 4])
def test_block_masked_equals_per_block_oracle(tiny_policy, sub_block):
    """Property 2: the packed single forward equals each block scored on its own, sub-block by sub-block:
    each sub-block fully masked with the earlier ones clean and the later ones masked (4: the whole block)."""
    batch = ScoringBatch.build([PROMPT], [COMPLETION], tiny_policy.pad_id, 4, sub_block=sub_block)
    with torch.no_grad():
        got = estimate("masked", tiny_policy, batch, (0, 0, 0)).logp[0, 1:]
    for value, block in zip(got.tolist(), oracle_blocks(tiny_policy, sub_block)):
        assert len(block.parts) == 4 // sub_block
        expected = block.first + sum(sum(part.cond[frozenset()].values()) for part in block.parts)
        assert value == pytest.approx(expected, abs=1e-4)


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
    """Property 4a: E[MC ELBO] = analytic sub-block-chain ELBO (z-test over 1000 independent keys). The count
    form's statistic rejects the whole-block ELBO (|z| > 8), the target of the estimators before sub-blocks."""
    samples = repeated(tiny_policy, "elbo", {"draws": 2, **options}, 1000)
    target = np.array([block.elbo for block in oracle_blocks(tiny_policy)])
    assert np.all(np.abs(z_scores(samples, target)) < Z_LIMIT), (samples.mean(0), target)
    if options == {"form": "count"}:
        whole = np.array([block.elbo for block in oracle_blocks(tiny_policy, sub_block=4)])
        assert np.abs(z_scores(samples, whole)).max() > POWER_Z, (samples.mean(0), whole)


@pytest.mark.parametrize("options", [{"form": "count"}, {"form": "uniform", "antithetic": True}])
def test_monte_carlo_elbo_is_unbiased_per_sub_block(block8, options):
    """Property 4 per sub-block, sub-blocks of 4 in blocks of 8: E[MC ELBO] = Σ_s analytic ELBO of sub-block s
    (|z| < 4.5 over 1500 keys)."""
    samples = repeated(block8, "elbo", {"draws": 2, **options}, 1500)
    blocks = oracle_blocks(block8)
    assert [[len(part.masked) for part in block.parts] for block in blocks] == [[3], [3, 4]]
    target = np.array([block.elbo for block in blocks])
    assert np.all(np.abs(z_scores(samples, target)) < Z_LIMIT), (samples.mean(0), target)


@pytest.mark.parametrize("geometry", ["tiny", "block8"])
def test_analytic_elbo_is_a_lower_bound_and_log_of_sum_is_caught(tiny_policy, block8, geometry):
    """Property 4b, per sub-block: ELBO <= exact log-lik. A log-of-sum where the sum-of-logs belongs breaks it."""
    policy = tiny_policy if geometry == "tiny" else block8
    parts = [part for block in oracle_blocks(policy) for part in block.parts]
    for part in parts:
        assert part.elbo <= part.exact + 1e-9
    # The plausible neighbour: log E_(l,M)[exp((m/l) S(M))] in place of E[(m/l) S(M)] (count form).
    wrong = []
    for part in parts:
        cond, masked, exact = part.cond, part.masked, part.exact
        m, mixture = len(masked), 0.0
        for l in range(1, m + 1):
            subsets = [s for s in cond if len(s) == m - l]
            for visible in subsets:
                score = sum(cond[visible].values())
                mixture += math.exp(m / l * score) / (m * len(subsets))
        wrong.append(math.log(mixture) > exact + 1e-9)
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
    """Property 5b: one Bernoulli mask per node, n = ceil(m/2) nodes: unbiased for the analytic ELBO. Whole
    blocks of 4 (m = 3): 2 nodes."""
    samples = repeated(tiny_policy, "gauss_legendre", {"nodes": 2}, 1000, sub_block=4)
    target = np.array([block.elbo for block in oracle_blocks(tiny_policy, sub_block=4)])
    assert np.all(np.abs(z_scores(samples, target)) < Z_LIMIT), (samples.mean(0), target)


def test_gauss_legendre_is_unbiased_per_sub_block_at_enough_nodes(block8):
    """Property 5 per sub-block (m_s <= 4 in blocks of 8). Exactly: the quadrature of each sub-block's enumerated
    integrand f_s (its later sub-blocks masked) is its analytic ELBO at n = ceil(m_s/2) nodes and not at fewer.
    Statistically: n = 2 nodes with one Bernoulli mask per node is unbiased for the analytic sub-block-chain ELBO
    (|z| < 4.5 over 1500 keys), where the whole block (m = 7) would need 4."""
    blocks = oracle_blocks(block8)
    for part in (part for block in blocks for part in block.parts):
        m = len(part.masked)

        def f(t):
            total = 0.0
            for visible, logps in part.cond.items():
                size = m - len(visible)
                total += t**size * (1 - t) ** (m - size) * sum(logps.values())
            return total / t

        def quadrature(n):
            return sum(w * f(t) for t, w in zip(*gauss_legendre_nodes(n)))

        enough = math.ceil(m / 2)
        assert abs(quadrature(enough) - part.elbo) < 1e-9 * abs(part.elbo)
        if enough > 1:
            assert abs(quadrature(enough - 1) - part.elbo) > 1e-6
    target = np.array([block.elbo for block in blocks])
    samples = repeated(block8, "gauss_legendre", {"nodes": 2}, 1500)
    assert np.all(np.abs(z_scores(samples, target)) < Z_LIMIT), (samples.mean(0), target)


def test_masks_are_keyed(tiny_policy):
    """Property 6: masks differ across inner iterations, samples and draws; same key, same masks."""
    batch = ScoringBatch.build([PROMPT] * 2, [COMPLETION] * 2, tiny_policy.pad_id, 4, sample_ids=[0, 1])
    for name, options in (("elbo", {"draws": 2}), ("gauss_legendre", {"nodes": 2}), ("ebpo", {}), ("d1", {})):
        with torch.no_grad():
            first = estimate(name, tiny_policy, batch, (1, 2, 0), **options).masks
            again = estimate(name, tiny_policy, batch, (1, 2, 0), **options).masks
            other = estimate(name, tiny_policy, batch, (1, 2, 1), **options).masks
        assert torch.equal(first, again)
        assert not torch.equal(first, other)
        if name != "d1":
            assert not torch.equal(first[0], first[1])  # samples
        if first.shape[1] > 1:
            assert not torch.equal(first[:, 0], first[:, 1])  # draws


LEGACY_OPTIONS = [
    ("masked", {}),
    ("elbo", {"draws": 2, "form": "count", "antithetic": False}),
    ("elbo", {"draws": 3, "form": "uniform", "antithetic": False}),
    ("elbo", {"draws": 4, "form": "count", "antithetic": True}),
    ("elbo", {"draws": 2, "form": "uniform", "antithetic": True}),
    ("gauss_legendre", {"nodes": 3, "exact_count": False}),
    ("gauss_legendre", {"nodes": 2, "exact_count": True}),
]


@pytest.mark.parametrize("name,options", LEGACY_OPTIONS)
def test_whole_sub_block_reduces_exactly_to_the_old_estimators(tiny_policy, name, options):
    """Sub-block = block: the same masks from the same keys and bit-identical values, draws, first-token terms
    and cost as the whole-block estimators before sub-blocks (a frozen copy: tests/methods/legacy_block_estimators.py).
    Rows of different prompt lengths, padding and a temperature, in one batch."""
    prompts = [PROMPT, [3, 4], [5, 6, 7, 8, 9, 10, 11, 12, 13]]
    completions = [COMPLETION, COMPLETION[:6], COMPLETION[:7]]
    batch = ScoringBatch.build(prompts, completions, tiny_policy.pad_id, 4, 0.9, sample_ids=[3, 8, 1], sub_block=4)
    with one_thread(), torch.no_grad():  # one reduction order for both paths, whatever the machine
        new = estimate(name, tiny_policy, batch, (1, 2, 3), **options)
        logp, units, masks, forward_tokens, draw_values, first = LEGACY[name](tiny_policy, batch, (1, 2, 3), **options)
    assert torch.equal(new.masks, masks) and torch.equal(new.units, units) and new.forward_tokens == forward_tokens
    assert torch.equal(new.logp, logp) and torch.equal(new.first_token_logp, first)
    assert (new.draw_values is None) == (draw_values is None)
    assert draw_values is None or torch.equal(new.draw_values, draw_values)
    with torch.no_grad():  # the sub-block-aware estimator (the policy's sub-block, 2) differs, at 2 views per mask
        sub = estimate(name, tiny_policy, dataclasses.replace(batch, sub_block=None), (1, 2, 3), **options)
    assert not torch.equal(sub.logp, logp)
    T, D, start = batch.ids.shape[1], masks.shape[1], 0  # the prompt [3, 4] ends inside block 0
    assert sub.forward_tokens == 3 * (T + 2 * D * (T - start)) and forward_tokens == 3 * (T + D * (T - start))


@pytest.mark.parametrize("name,options", [("elbo", {"draws": 2}), ("elbo", {"draws": 2, "form": "uniform"}),
                                          ("gauss_legendre", {"nodes": 2}), ("gauss_legendre", {"exact_count": True}),
                                          ("ebpo", {})])
def test_masks_do_not_depend_on_the_padded_width(tiny_policy, name, options):
    """A row scored alone and inside a batch padded to a wider T (a longer row beside it) gets the same masks
    (exactly) and the same values (fp32, to rounding: other tensor shapes)."""
    alone = ScoringBatch.build([PROMPT], [COMPLETION], tiny_policy.pad_id, 4, sample_ids=[7])
    wide = ScoringBatch.build([PROMPT, [3]], [COMPLETION, list(range(20, 50))], tiny_policy.pad_id, 4, sample_ids=[7, 2])
    assert wide.ids.shape[1] > alone.ids.shape[1] + 8
    with torch.no_grad():
        one = estimate(name, tiny_policy, alone, (4, 5, 6), **options)
        many = estimate(name, tiny_policy, wide, (4, 5, 6), **options)
    T = alone.ids.shape[1]
    assert torch.equal(one.masks[0], many.masks[0, :, :T]) and not many.masks[0, :, T:].any()
    torch.testing.assert_close(one.logp[0], many.logp[0, : T // 4], rtol=0, atol=2e-5)


# ---------------------------------------------------------------------------------------------
# the trajectory estimator: the exact log-probability of the recorded decoding steps

TRAJECTORY_PROMPTS = [[5, 6, 7], [9, 10, 11, 12], [13] * 8, [20, 21, 22, 23, 24], [30], [40, 41, 42, 43, 44, 45, 46]]


@pytest.mark.parametrize("order,temperature,threshold,sub_block", [
    ("confidence", 1.0, 1.0, 2), ("confidence", 0.7, 0.3, 2), ("confidence", 1.3, 0.2, 4), ("random", 1.0, 1.0, 2),
    ("random", 0.8, 1.0, 1), ("confidence", 0.0, 0.2, 2),  # temperature 0: greedy rows, untempered probabilities
])
def test_trajectory_terms_are_the_samplers_draw_probabilities(tiny_policy, order, temperature, threshold, sub_block):
    """Token for token, the trajectory's term of each completion token (AR first tokens included) is the log of
    the probability the sampler recorded drawing it with; the block value is their sum over the block."""
    out = generate(tiny_policy, TRAJECTORY_PROMPTS, SamplerConfig(max_new_tokens=9, temperature=temperature,
                   threshold=threshold, order=order, sub_block=sub_block), seed=5)
    batch = ScoringBatch.build(TRAJECTORY_PROMPTS, out.tokens, tiny_policy.pad_id, 4, temperature,
                               sub_block=sub_block, steps=out.steps)
    with torch.no_grad():
        est = estimate("trajectory", tiny_policy, batch, (0, 0, 0))
    together = 0
    for row, (prompt, probs, steps) in enumerate(zip(TRAJECTORY_PROMPTS, out.probs, out.steps)):
        recorded = torch.tensor([math.log(p) for p in probs], dtype=torch.float64)
        got = est.token_logp[row, len(prompt) : len(prompt) + len(probs)].double()
        torch.testing.assert_close(got, recorded, rtol=0, atol=5e-5)
        per_block = torch.zeros(batch.ids.shape[1] // 4, dtype=torch.float64)
        per_block.index_add_(0, (torch.arange(len(probs)) + len(prompt)) // 4, recorded)
        torch.testing.assert_close(est.logp[row].double()[est.units[row]], per_block[est.units[row]], rtol=0, atol=2e-4)
        together += len(steps) - len(set(steps))
    assert (together > 0) == (threshold < 1)  # tokens committed together share their step's state


def test_trajectory_views_are_the_samplers_states(tiny_policy):
    """One view per decoding step of a block (B - 1 with one token per step), the view of step v masking exactly
    the positions decoded at steps >= v: a block of V steps costs V x B noisy tokens in one forward."""
    out = generate(tiny_policy, [PROMPT], SamplerConfig(max_new_tokens=11, temperature=1.0, sub_block=2), seed=1)
    batch = ScoringBatch.build([PROMPT], out.tokens, tiny_policy.pad_id, 4, steps=out.steps)
    with torch.no_grad():
        est = estimate("trajectory", tiny_policy, batch, (0, 0, 0))
    T = batch.ids.shape[1]
    assert est.masks.shape == (1, 3, T) and est.forward_tokens == T + 3 * (T - 4)
    steps = batch.steps[0]
    for position in range(len(PROMPT), T):
        if position % 4 == 0:
            continue
        block = range(position // 4 * 4, position // 4 * 4 + 4)
        rank = sum(1 for j in block if j >= len(PROMPT) and j % 4 and steps[j] < steps[position])
        view = est.masks[0, rank, block.start : block.stop].tolist()
        assert view == [j >= len(PROMPT) and j % 4 != 0 and steps[j] >= steps[position] for j in block], position


def test_trajectory_needs_the_recorded_steps(tiny_policy):
    with pytest.raises(ValueError, match="recorded steps"):
        estimate("trajectory", tiny_policy, batch_for(tiny_policy), (0, 0, 0))
    assert ESTIMATORS["trajectory"].unit == "block" and "trajectory" in BLOCK_ESTIMATORS


def test_every_estimator_is_differentiable(tiny_policy):
    batch = batch_for(tiny_policy, steps=LEFT_TO_RIGHT)
    for name in ESTIMATORS:
        tiny_policy.model.zero_grad()
        sequence_logprob(estimate(name, tiny_policy, batch, (0, 0, 0))).sum().backward()
        grads = [p.grad for p in tiny_policy.model.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads), name
    tiny_policy.model.zero_grad()
