"""The seed's silent bugs (``experiments.silent_bugs``) change exactly what they claim, ``bug: none`` is
block-GRPO bit for bit, and for each bug the property test that guards the core (docs/design.md) would reject it."""
import math

import numpy as np
import pytest
import torch

from arena.config import ConfigError, build
from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import build_policy
from conftest import SMALL, digit_share, sharpen
from experiments.silent_bugs import SeedBugBlockGRPO, SeedBugConfig, log_of_sum
from methods import likelihood
from methods.base import make_method
from methods.oracle import completion_blocks

FAST = {"group_size": 4, "max_new_tokens": 8, "lr": 1e-2, "clip_eps": 0.5, "estimator": "elbo", "draws": 2}
PROMPTS = ["12+7=", "3+4=", "45+67=", "9+9="]


def buggy(policy, **options):
    return SeedBugBlockGRPO(policy, build(SeedBugConfig, {**FAST, **options}), seed=3)


def test_no_bug_is_block_grpo_bit_for_bit():
    policies = [sharpen(build_policy(SMALL), std=0.1) for _ in range(2)]
    methods = [make_method("block_grpo", policies[0], {**FAST, "inner_iterations": 2}, seed=3),
               buggy(policies[1], bug="none", inner_iterations=2)]
    for method, policy in zip(methods, policies):
        for step in range(2):
            method.step([policy.encode(p) for p in PROMPTS], digit_share, step)
    for a, b in zip(*(p.model.parameters() for p in policies)):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(policies[0].model.parameters(),
                                                      sharpen(build_policy(SMALL), std=0.1).model.parameters()))


def test_boundary_shift_breaks_property_3_and_nothing_else(tiny_policy):
    """Property 3 (the first-token term is the sampler's own log-softmax) holds without the bug and fails with it;
    the in-block terms are untouched."""
    prompts = [[5, 6, 7, 8, 9], [3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]
    out = generate(tiny_policy, prompts, SamplerConfig(max_new_tokens=9), seed=4)
    batch = likelihood.ScoringBatch.build(prompts, out.tokens, tiny_policy.pad_id, 4)
    right, wrong = (buggy(tiny_policy, bug=bug)._score(batch, (0, 0, 0), grad=False)
                    for bug in ("none", "boundary_shift"))
    torch.testing.assert_close(wrong.logp - wrong.first_token_logp, right.logp - right.first_token_logp)
    gaps = {"none": [], "boundary_shift": []}
    for row, (prompt, probs) in enumerate(zip(prompts, out.probs)):
        for index, prob in enumerate(probs):
            position = len(prompt) + index
            if position % 4 == 0:
                for bug, est in (("none", right), ("boundary_shift", wrong)):
                    gaps[bug].append(abs(float(est.first_token_logp[row, position // 4]) - math.log(prob)))
    assert len(gaps["none"]) >= 6 and max(gaps["none"]) < 1e-4
    assert min(gaps["boundary_shift"]) > 1e-2, gaps["boundary_shift"]


def test_log_of_sum_is_above_the_elbo_and_property_4a_rejects_it(tiny_policy):
    """Per row, log mean exp >= mean (Jensen), strictly where draws differ; over 1000 mask keys the mean is
    far above the analytic ELBO (the z statistic of property 4a: |z| > 8), while the right reduction is not."""
    prompt, completion, repeats = [5, 6, 7, 8, 9], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30], 1000
    batch = likelihood.ScoringBatch.build([prompt] * repeats, [completion] * repeats, tiny_policy.pad_id, 4,
                                          sample_ids=range(repeats))
    with torch.no_grad():
        right = likelihood.estimate("elbo", tiny_policy, batch, (0, 0, 0), draws=4)
    wrong = log_of_sum(right)
    assert bool((wrong.logp >= right.logp - 1e-5)[right.units].all())
    assert float((wrong.logp - right.logp)[right.units].max()) > 0.1
    target = np.array([block.elbo for block in completion_blocks(tiny_policy, prompt, completion)])

    def z(est):
        values = est.logp[:, len(prompt) // 4 :].double().numpy()
        return (values.mean(0) - target) / (values.std(0, ddof=1) / math.sqrt(repeats))
    assert np.abs(z(right)).max() < 4.5 and z(wrong).max() > 8, (z(right), z(wrong))


def test_reused_mask_keys_break_property_6(monkeypatch):
    """Property 6: masks differ across inner iterations. With the bug every iteration scores iteration 0's masks."""
    calls = []
    original = likelihood.Scorer.__call__

    def recording(scorer, policy, batch, key):
        est = original(scorer, policy, batch, key)
        calls.append((torch.is_grad_enabled(), est.masks.clone()))
        return est

    monkeypatch.setattr(likelihood.Scorer, "__call__", recording)
    for bug in ("none", "reused_mask_keys"):
        calls.clear()
        policy = sharpen(build_policy(SMALL), std=0.1)
        buggy(policy, bug=bug, inner_iterations=3).step([policy.encode(p) for p in PROMPTS], digit_share, step=2)
        masks = [m for grad, m in calls if grad]  # the θ pass of iterations 0, 1, 2
        assert len(masks) == 3
        same = [torch.equal(masks[0], m) for m in masks[1:]]
        assert same == ([True, True] if bug == "reused_mask_keys" else [False, False])


@pytest.mark.parametrize("options,message", [
    ({"bug": "log_of_sum", "estimator": "masked"}, "needs estimator 'elbo' with draws >= 2"),
    ({"bug": "log_of_sum", "draws": 1}, "needs estimator 'elbo' with draws >= 2"),
    ({"bug": "reused_mask_keys", "inner_iterations": 1}, "needs inner_iterations >= 2"),
    ({"bug": "off_by_two"}, "bug"),
])
def test_a_bug_that_would_change_nothing_is_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        build(SeedBugConfig, {**FAST, **options})
