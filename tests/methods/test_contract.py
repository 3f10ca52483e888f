"""The contract every registered method honours (the evosax pattern): a new method is covered
automatically. Each takes a step on the tiny model, reports consumption, changes its trainable
parameters, keeps its statistics finite, and round-trips its state so that a resumed run continues
exactly as an uninterrupted one. Every method reports the common statistics with one meaning."""
import copy
import io
import math
import statistics

import pytest
import torch

import methods
from arena.model.tiny import build_policy
from conftest import SMALL, share_of_ones, sharpen
from arena.config import ConfigError
from methods.base import COMMON_STATS, make_method
from methods.likelihood import BLOCK_ESTIMATORS

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

    # resume: a fresh method on a copy of the policy, loaded from the state, continues identically; the state
    # is tensors, dicts, lists and numbers, so a checkpoint of it loads without unpickling code (weights_only)
    saved = io.BytesIO()
    torch.save(method.state_dict(), saved)
    state = torch.load(io.BytesIO(saved.getvalue()), weights_only=True)
    twin_policy = copy.deepcopy(policy)
    twin = make_method(method_name, twin_policy, SMOKE.get(method_name), seed=0)
    twin.load_state_dict(state)
    method.step(prompts_for(policy), share_of_ones, step=1)
    twin.step(prompts_for(twin_policy), share_of_ones, step=1)
    for (name, a), (_, b) in zip(policy.model.named_parameters(), twin_policy.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=f"{method_name}: {name} diverged after resume")


@pytest.mark.parametrize("estimator", [name for name in BLOCK_ESTIMATORS if name != "elbo"])  # elbo: the default
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


@pytest.mark.parametrize("trainable", ["full", "lora"])
def test_flops_charge_2p_per_forward_and_2p_plus_2p_trained_per_backward_token(method_name, trainable):
    """Counted from outside: a hook on the decoder counts the tokens of every forward call, one on its final
    norm those of every backward pass; P and P_t counted from the parameters' names (all but the untied
    input embedding; the trained ones among them). The GRPO family pays a backward pass (full fine-tuning:
    4·P per backward token, 6·P per trained token in all), ES none."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    extra = {"sigma": 0.1} if method_name == "es" and trainable == "lora" else {}
    method = make_method(method_name, policy, {**SMOKE.get(method_name, {}), **extra, "trainable": trainable}, seed=0)
    decoder, counted = policy.model.get_decoder(), {"forward": 0, "backward": 0}

    def forward(module, args, kwargs, output):
        counted["forward"] += (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).numel()

    def backward(module, grad_input, grad_output):
        counted["backward"] += grad_output[0].shape[0] * grad_output[0].shape[1]

    decoder.register_forward_hook(forward, with_kwargs=True)
    decoder.norm.register_full_backward_hook(backward)
    result = method.step(prompts_for(policy), share_of_ones, step=0)
    named = dict(policy.model.named_parameters())
    traversed = sum(p.numel() for n, p in named.items() if "embed_tokens" not in n)
    trained = sum(p.numel() for n, p in named.items() if p.requires_grad and "embed_tokens" not in n)
    used = result.consumption
    assert used.forward_tokens == counted["forward"] > 0
    assert result.stats["backward_tokens"] == counted["backward"]
    assert used.flops == 2 * traversed * counted["forward"] + (2 * traversed + 2 * trained) * counted["backward"]
    assert result.stats["flops"] == used.flops
    if method_name == "es":
        assert counted["backward"] == 0 and used.flops == 2 * traversed * used.forward_tokens
    else:
        assert counted["backward"] > 0
        if trainable == "full":
            assert trained == traversed
            assert used.flops == 2 * traversed * (used.forward_tokens - counted["backward"]) + 6 * traversed * \
                counted["backward"]
        else:
            assert 0 < trained < traversed / 5  # LoRA: the backward costs about 2·P, not 4·P


def test_a_named_subset_moves_only_the_named_parameters(method_name):
    """trainable: subset with a name pattern (the norms) for every method that offers it: only the
    parameters whose names match move, and a pattern that matches nothing is an error naming it."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    if "trainable_names" not in {f.name for f in methods.get_method(method_name).Config.__dataclass_fields__.values()}:
        pytest.skip(f"{method_name} offers no subset")
    options = {**SMOKE.get(method_name, {}), "trainable": "subset", "trainable_names": ["norm"]}
    reward = share_of_ones
    if method_name == "es":  # norm weights are about 1, and members must differ: a larger σ, a dense reward
        options["sigma"], reward = 0.5, lambda index, text: sum(map(ord, text)) / (127 * max(1, len(text)))
    method = make_method(method_name, policy, options, seed=0)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    method.step(prompts_for(policy), reward, step=0)
    moved = {n for n, p in policy.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved and all("norm" in n for n in moved), moved
    assert {n for n, p in policy.model.named_parameters() if p.requires_grad} == {n for n in before if "norm" in n}
    with pytest.raises(ValueError, match=r"\['no_such_layer'\] match no parameter"):
        make_method(method_name, build_policy(SMALL), {**options, "trainable_names": ["norm", "no_such_layer"]}, 0)
    for bad, message in (({"trainable_names": ["("]}, r"trainable_names\[0\]: not a regular expression"),
                         ({"trainable_names": []}, "needs at least one name pattern"),
                         ({"trainable": "full"}, "goes with trainable: subset")):
        with pytest.raises(ConfigError, match=message):
            make_method(method_name, build_policy(SMALL), {**options, **bad}, 0)


def test_every_config_answers_what_arena_asks_and_counts_its_samples(method_name):
    """Every registered method's Config is a MethodConfig; a step generates what samples_per_step says."""
    config_class = methods.method_class(method_name).Config
    assert issubclass(config_class, methods.MethodConfig)
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method(method_name, policy, SMOKE.get(method_name), seed=0)
    result = method.step(prompts_for(policy), share_of_ones, step=0)
    assert method.config.samples_per_step(len(prompts_for(policy))) == result.consumption.samples
    assert isinstance(method.config.inactive_options(), set)
    assert set(method.config.tags()) <= {"arena.estimator"}


def test_names_resolve_where_they_are_registered():
    assert methods.method_class("block_grpo") is methods.get_method("block_grpo")
    assert methods.method_family("study_plugins:NaNGradientGRPO") == "block_grpo"
    assert methods.method_family("study_plugins:Stay") is None and methods.method_family("grpo") == "grpo"
    with pytest.raises(ConfigError, match=r"^method: unknown method 'sgd'; known methods: block_grpo, "):
        methods.method_class("sgd")
    with pytest.raises(ConfigError, match=r"^method: 'study_plugins:PlainConfigMethod': its Config must subclass "
                                          r"methods.base.MethodConfig"):
        methods.method_class("study_plugins:PlainConfigMethod")


def test_the_estimator_options_are_checked_once_not_at_every_forward(monkeypatch):
    """block_grpo's config checks its estimator's options; its steps score without checking them again."""
    from methods import likelihood

    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("block_grpo", policy, {**SMOKE["block_grpo"], "estimator": "elbo", "draws": 2,
                                                "inner_iterations": 2}, seed=0)
    assert method.scorer == likelihood.Scorer("elbo", {"draws": 2, "form": "count", "antithetic": False})
    checked = []
    monkeypatch.setattr(likelihood, "build", lambda *args, **kwargs: checked.append(args))
    method.step(prompts_for(policy), share_of_ones, step=0)
    assert checked == []
