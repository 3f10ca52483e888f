"""The contract every registered method honours (the evosax pattern): a new method is covered
automatically. Each takes a step on the tiny model, reports consumption, changes its trainable
parameters, keeps its statistics finite, and round-trips its state so that a resumed run continues
exactly as an uninterrupted one. Every method reports the common statistics with one meaning."""
import copy
import math
import statistics

import pytest
import torch

import methods
from arena.model.tiny import build_policy
from conftest import SMALL, share_of_ones, sharpen
from arena.config import ConfigError
from methods.base import COMMON_STATS, make_method

# Small budgets so that one step takes a second or two on CPU; everything else is the default.
SMOKE = {
    "es": {"population": 4, "prompts_per_member": 2, "max_new_tokens": 8, "sigma": 0.05},  # σ: members must differ
    "grpo": {"group_size": 2, "max_new_tokens": 8},
    "diffu_grpo": {"group_size": 2, "max_new_tokens": 8},
    "block_grpo": {"group_size": 2, "max_new_tokens": 8},
}


def prompts_for(policy):
    return [policy.encode(p) for p in ("12+7=", "3+4=", "45+67=")]


def trainable_snapshot(policy):
    return {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


@pytest.fixture(params=sorted(methods.REGISTRY))
def method_name(request):
    return request.param


def test_step_consumes_changes_and_round_trips(method_name):
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method(method_name, policy, SMOKE.get(method_name), seed=0)
    before = trainable_snapshot(policy)
    result = method.step(prompts_for(policy), share_of_ones, step=0)
    used = result.consumption
    assert used.samples > 0 and used.tokens > 0 and used.forward_tokens > used.tokens
    assert all(math.isfinite(v) for v in result.stats.values()), result.stats
    after = trainable_snapshot(policy)
    assert after.keys() == before.keys() and len(after) > 0
    assert any(not torch.equal(before[n], after[n]) for n in after), "no trainable parameter moved"

    # resume: a fresh method on a copy of the policy, loaded from the state, continues identically
    state = copy.deepcopy(method.state_dict())
    twin_policy = copy.deepcopy(policy)
    twin = make_method(method_name, twin_policy, SMOKE.get(method_name), seed=0)
    twin.load_state_dict(state)
    method.step(prompts_for(policy), share_of_ones, step=1)
    twin.step(prompts_for(twin_policy), share_of_ones, step=1)
    for (name, a), (_, b) in zip(policy.model.named_parameters(), twin_policy.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=f"{method_name}: {name} diverged after resume")


@pytest.mark.parametrize("estimator", ["masked", "gauss_legendre", "trajectory"])  # elbo: the default, above
def test_block_grpo_takes_every_block_estimator(estimator):
    """block_grpo accepts each block estimator of methods.likelihood.ESTIMATORS by name, like the default: a step
    on the tiny model (sub-blocks of 2 in blocks of 4) moves the parameters with finite statistics."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("block_grpo", policy, {**SMOKE["block_grpo"], "estimator": estimator}, seed=0)
    before = trainable_snapshot(policy)
    result = method.step(prompts_for(policy), share_of_ones, step=0)
    assert all(math.isfinite(v) for v in result.stats.values()), result.stats
    assert result.consumption.forward_tokens > result.consumption.tokens
    after = trainable_snapshot(policy)
    assert any(not torch.equal(before[n], after[n]) for n in after), f"{estimator}: no trainable parameter moved"


def test_step_reports_the_common_statistics(method_name):
    """Recomputed from outside: the rewards the method asked for, and the trainable parameters moved."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method(method_name, policy, SMOKE.get(method_name), seed=0)
    asked = []

    def recorded(index, text):
        asked.append(share_of_ones(index, text))
        return asked[-1]

    before = trainable_snapshot(policy)
    result = method.step(prompts_for(policy), recorded, step=0)
    after = trainable_snapshot(policy)
    stats, used = result.stats, result.consumption
    assert set(COMMON_STATS) <= set(stats) and all(math.isfinite(stats[k]) for k in COMMON_STATS), stats
    assert (stats["samples"], stats["tokens"], stats["forward_tokens"]) == (used.samples, used.tokens,
                                                                            used.forward_tokens)
    assert used.samples == len(asked)  # ES: every member x prompt, not one fitness per member
    assert stats["reward_mean"] == pytest.approx(statistics.fmean(asked), rel=1e-12, abs=1e-12)
    assert stats["reward_std"] == pytest.approx(statistics.stdev(asked), rel=1e-9, abs=1e-12)
    moved = math.sqrt(sum(float((after[n].float() - before[n].float()).double().square().sum()) for n in after))
    assert moved > 0 and stats["update_norm"] == pytest.approx(moved, rel=1e-6)


def test_lora_moves_only_the_adapter(method_name):
    """trainable: lora is the same choice for every method: the base weights stay bit-identical."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    # ES needs a larger σ to move greedy outputs through a zero-initialised adapter (B = 0)
    extra = {"sigma": 0.1} if method_name == "es" else {}
    method = make_method(method_name, policy, {**SMOKE.get(method_name, {}), **extra, "trainable": "lora"}, seed=0)
    initial = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" in n}
    method.step(prompts_for(policy), share_of_ones, step=0)
    adapters = 0
    for name, param in policy.model.named_parameters():
        if "lora_" in name:
            adapters += 1
            continue
        original = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(param.detach(), base[original]), f"{method_name} moved base weight {original}"
    assert adapters > 0
    assert any(not torch.equal(p.detach(), initial[n]) for n, p in policy.model.named_parameters() if "lora_" in n)


def test_unknown_options_are_named(method_name):
    with pytest.raises(ConfigError, match="no_such_option"):
        make_method(method_name, build_policy(SMALL), {"no_such_option": 1}, seed=0)


def test_unknown_method_lists_known():
    with pytest.raises(KeyError, match="known methods"):
        methods.get_method("sgd")


def test_lora_initialisation_is_keyed_not_global():
    from methods.base import Trainable, make_trainable

    adapters = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # whatever ran before must not matter
        policy = build_policy(SMALL)
        make_trainable(policy, Trainable("lora"), seed=7)
        adapters.append({n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_A" in n})
    assert adapters[0].keys() and all(torch.equal(adapters[0][n], adapters[1][n]) for n in adapters[0])
