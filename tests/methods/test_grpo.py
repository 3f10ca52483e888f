"""The GRPO family: learning on a toy reward, mask keying across inner iterations, the μ=1 identity,
the frozen reference scored through a view, and two gloo processes computing what one computes.
Non-finite safety: a zero reward moves nothing, exactly; log-ratios are clamped and counted; a NaN
reward or gradient skips the step, and too many in a row stop the run with a named error."""
import math

import pytest
import torch
import torch.multiprocessing as mp

from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import build_policy
from conftest import SMALL, digit_share, gloo_rank, sharpen
from methods import likelihood
from arena.config import ConfigError
from methods.base import COMMON_STATS, NonFiniteError, make_method
from methods.grpo import LOG_RATIO_BOUND, GRPOConfig, clamped_units, clipped_objective

ARMS = {
    "grpo": {},
    "diffu_grpo": {},
    "block_grpo": {"estimator": "elbo", "draws": 2},
}
FAST = {"group_size": 4, "max_new_tokens": 8, "lr": 1e-2, "clip_eps": 0.5}
PROMPTS = ["12+7=", "3+4=", "45+67=", "9+9="]


def fresh_reward(policy, seed: int, n: int = 64) -> float:
    prompts = [policy.encode(p) for p in PROMPTS] * (n // len(PROMPTS))
    out = generate(policy, prompts, SamplerConfig(max_new_tokens=8, temperature=1.0), seed=seed)
    return sum(digit_share(0, t) for t in out.texts) / len(out.texts)


@pytest.mark.slow
def test_each_method_raises_a_toy_reward():
    for name, options in ARMS.items():
        policy = sharpen(build_policy(SMALL), std=0.1)
        before = fresh_reward(policy, seed=1000)
        method = make_method(name, policy, {**FAST, **options}, seed=0)
        prompts = [policy.encode(p) for p in PROMPTS]
        for step in range(8):
            method.step(prompts, digit_share, step)
        after = fresh_reward(policy, seed=1000)
        assert after > before + 0.3, f"{name}: fresh reward {before:.3f} -> {after:.3f}"


def test_a_dual_clip_subclass_changes_the_update_only_once_the_ratio_leaves_1():
    """A variant overrides ``GRPO.surrogate`` (tests/study_plugins.py, named by import path as a study names it):
    at inner_iterations 1 every ratio is 1 and it trains bit for bit as GRPO; at 2 the second iteration's ratios
    move (up to 25 here), and the dual clip bounds the negative advantages' terms: another loss, other weights."""
    for mu, same in ((1, True), (2, False)):
        trained = []
        for name in ("grpo", "study_plugins:DualClipGRPO"):
            policy = sharpen(build_policy(SMALL), std=0.1)
            method = make_method(name, policy, {**FAST, "inner_iterations": mu}, seed=0)
            result = method.step([policy.encode(p) for p in PROMPTS], digit_share, step=0)
            trained.append((result.stats["loss"], [p.detach().clone() for p in policy.model.parameters()]))
        (loss, weights), (dual_loss, dual_weights) = trained
        assert (loss == dual_loss) is same and all(map(torch.equal, weights, dual_weights)) is same, mu


def test_make_method_takes_an_import_path_and_names_an_unknown_method():
    assert type(make_method("study_plugins:DualClipGRPO", build_policy(SMALL), {"dual_clip": 2.0}, 0)).__name__ == \
        "DualClipGRPO"
    with pytest.raises(ConfigError, match="unknown method 'sgd'; known methods: block_grpo"):
        make_method("sgd", build_policy(SMALL), {}, 0)


def test_inner_iterations_draw_fresh_masks_shared_by_theta_and_theta_old(monkeypatch):
    calls = []
    original = likelihood.Scorer.__call__

    def recording(scorer, policy, batch, key):
        est = original(scorer, policy, batch, key)
        calls.append((tuple(key), torch.is_grad_enabled(), est.masks.clone(), list(batch.sample_ids)))
        return est

    monkeypatch.setattr(likelihood.Scorer, "__call__", recording)
    for name, options in (("diffu_grpo", {}), ("block_grpo", {"estimator": "elbo"}),
                          ("block_grpo", {"estimator": "gauss_legendre"})):
        calls.clear()
        policy = sharpen(build_policy(SMALL), std=0.1)
        method = make_method(name, policy, {**FAST, **options, "inner_iterations": 3}, seed=5)
        method.step([policy.encode(p) for p in PROMPTS], digit_share, step=2)
        old = {key[2]: masks for key, grad, masks, _ in calls if not grad}
        new = {key[2]: masks for key, grad, masks, _ in calls if grad}
        assert sorted(new) == [0, 1, 2] and sorted(old) == [1, 2]  # θ_old of iteration 0 is θ itself
        assert all(key[:2] == (5, 2) for key, *_ in calls)
        for it in (1, 2):
            assert torch.equal(old[it], new[it]), f"{name}: θ and θ_old masks differ in iteration {it}"
        assert not torch.equal(new[0], new[1]) and not torch.equal(new[1], new[2])


def test_mu_one_ratio_is_one_and_gradient_is_the_policy_gradient():
    policy = sharpen(build_policy(SMALL), std=0.1)
    prompts = [policy.encode(p) for p in PROMPTS]
    out = generate(policy, prompts, SamplerConfig(max_new_tokens=8, temperature=1.0), seed=0)
    batch = likelihood.ScoringBatch.build(prompts, out.tokens, policy.pad_id, policy.block_size)
    advantages = torch.tensor([1.5, -0.5, 0.25, -1.25])
    params = [p for p in policy.model.parameters()]

    est = likelihood.estimate("elbo", policy, batch, (0, 0, 0), draws=2)
    terms, ratio, _ = clipped_objective(est.logp, est.logp.detach(), None, advantages, est.units, GRPOConfig())
    assert torch.equal(ratio[est.units], torch.ones_like(ratio[est.units]))
    clipped_grads = torch.autograd.grad(terms.sum(), params, allow_unused=True)

    est = likelihood.estimate("elbo", policy, batch, (0, 0, 0), draws=2)
    plain = -(advantages[:, None] * est.logp * est.units).sum()  # -A ∇ℓ̂, written independently
    plain_grads = torch.autograd.grad(plain, params, allow_unused=True)
    for a, b in zip(clipped_grads, plain_grads):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_full_fine_tuning_scores_its_frozen_reference_without_swapping_the_policy_model(monkeypatch):
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("block_grpo", policy, {**FAST, "beta": 0.05, "inner_iterations": 2}, seed=0)
    trained, scored = policy.model, []
    original = likelihood.Scorer.__call__

    def recording(scorer, scored_policy, batch, key):
        assert policy.model is trained, "the shared policy's model was swapped"
        scored.append(scored_policy.model)
        return original(scorer, scored_policy, batch, key)

    monkeypatch.setattr(likelihood.Scorer, "__call__", recording)
    stats = method.step([policy.encode(p) for p in PROMPTS], digit_share, 0).stats
    assert policy.model is trained and trained is not method.reference
    assert any(m is method.reference for m in scored) and any(m is trained for m in scored)
    assert stats["kl"] > 0  # iteration 1 scores the moved policy against the frozen copy


def test_step_statistics_have_consistent_names():
    names = None
    for name, options in ARMS.items():
        policy = sharpen(build_policy(SMALL), std=0.1)
        method = make_method(name, policy, {**FAST, **options}, seed=0)
        stats = method.step([policy.encode(p) for p in PROMPTS], digit_share, 0).stats
        assert stats["ratio_mean"] == 1.0 and stats["clip_frac"] == 0.0  # μ = 1: θ_old = θ
        names = names or set(stats)
        assert set(stats) == names
    assert {"loss", "frac_zero_std_groups", "clip_frac", "clamped_frac", "skipped_steps", "kl", "ratio_mean",
            "ratio_max", "estimator_std", "grad_norm", "completion_length", *COMMON_STATS} <= names


def _replica(rank: int, world: int, directory: str) -> None:
    torch.set_num_threads(1)  # the same CPU kernels in both runs, whatever the machine; no oversubscription
    with gloo_rank(f"{directory}/grpo-store-{world}", rank, world):
        policy = sharpen(build_policy(SMALL), std=0.1)
        options = {**FAST, "lr": 1e-4, "estimator": "elbo", "beta": 0.05, "inner_iterations": 2}
        method = make_method("block_grpo", policy, options, seed=3)
        for step in range(2):
            result = method.step([policy.encode(p) for p in PROMPTS], digit_share, step)
        if rank == 0:
            torch.save({"params": {n: p.detach() for n, p in policy.model.named_parameters()},
                        "consumption": result.consumption, "stats": result.stats}, f"{directory}/grpo-{world}.pt")


@pytest.mark.slow
def test_two_gloo_processes_match_one(tmp_path):
    """Same data, 1 vs 2 ranks, 2 steps x 2 inner iterations of AdamW at lr 1e-4.

    Gradients agree to float rounding, but Adam divides by sqrt(v): a coordinate whose exact gradient
    is zero (the key bias: softmax ignores a constant shift) takes a +-lr step from rounding noise
    alone. So: 99.9% of coordinates within 1e-7, every coordinate within 5% of the 4 steps' lr.
    """
    for world in (1, 2):
        mp.spawn(_replica, args=(world, str(tmp_path)), nprocs=world)
    one, two = (torch.load(tmp_path / f"grpo-{w}.pt", weights_only=False) for w in (1, 2))
    # statistics and budget are global, not per rank (forward tokens include each rank's own padding)
    a, b = one["consumption"], two["consumption"]
    assert (a.samples, a.tokens) == (b.samples, b.tokens) and abs(a.forward_tokens / b.forward_tokens - 1) < 0.25
    for name in ("reward_mean", "reward_std"):
        assert abs(one["stats"][name] - two["stats"][name]) < 1e-6, name
    # the global norm of the replicated update, counted once (not once per replica: that is √2 larger)
    assert abs(two["stats"]["update_norm"] / one["stats"]["update_norm"] - 1) < 1e-2
    one, two = one["params"], two["params"]
    start = dict(sharpen(build_policy(SMALL), std=0.1).model.named_parameters())
    differences = torch.cat([(one[n] - two[n]).abs().flatten() for n in one])
    assert differences.max() < 0.05 * 4 * 1e-4
    assert (differences > 1e-7).float().mean() < 1e-3
    assert sum(not torch.equal(one[n], start[n].detach()) for n in one) == len(one)


# ---------------------------------------------------------------------------------------------
# non-finite safety (issue 11, item 3)

# The reproduction: a random tiny model with a x10 output layer, ELBO with 2 draws, β = 0.04, μ = 3,
# micro-batches of 2, lr 3e-3. Before the fix, a zero reward moved every parameter (the reference was
# scored on the whole batch, θ on micro-batches: ref - logp ~ 1e-6, which Adam makes a full-lr step),
# and further on overflowed exp(ref - logp) into NaN parameters.
UNSTABLE = {"estimator": "elbo", "draws": 2, "beta": 0.04, "inner_iterations": 3, "micro_batch": 2, "lr": 3e-3,
            "group_size": 4, "max_new_tokens": 8}


def unstable_policy():
    policy = build_policy(SMALL)
    with torch.no_grad():
        policy.model.get_output_embeddings().weight.mul_(10)
    return policy


def parameters(policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def unchanged(policy, before) -> bool:
    return all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters())


@pytest.mark.slow
def test_a_zero_reward_moves_nothing_exactly():
    policy = unstable_policy()
    method = make_method("block_grpo", policy, UNSTABLE, seed=0)
    before = parameters(policy)
    for step in range(2):
        stats = method.step([policy.encode(p) for p in PROMPTS[:2]], lambda i, text: 0.0, step).stats
        assert stats["completion_length"] > 4  # the batch is not empty: units were scored
        assert (stats["kl"], stats["grad_norm"], stats["update_norm"], stats["ratio_max"]) == (0, 0, 0, 1)
    assert all(torch.isfinite(p).all() for p in policy.model.parameters())
    assert unchanged(policy, before), "a zero reward moved the policy"


def test_log_ratios_are_clamped_before_exp_and_counted():
    logp = torch.tensor([[0.0, -100.0, 100.0, -5.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, 0.0, -5.0]])
    ref = torch.tensor([[0.0, 0.0, 0.0, -5.0 + 100.0]])  # unit 3: 100 nats above θ, e^100 overflows float32
    units = torch.ones(1, 4, dtype=torch.bool)
    config = GRPOConfig(beta=0.04)
    terms, ratio, kl = clipped_objective(logp, old, ref, torch.tensor([-1.0]), units, config)
    bound = LOG_RATIO_BOUND
    assert torch.equal(ratio.detach(), torch.exp(torch.tensor([[0.0, -bound, bound, 0.0]])))
    assert torch.isfinite(terms).all() and torch.isfinite(kl).all()
    (gradient,) = torch.autograd.grad(terms.sum(), logp)
    assert torch.isfinite(gradient).all()
    # k3 beyond the bound continues along its tangent: finite, and still pulling θ back to the reference
    assert gradient[0, 3] == pytest.approx(-config.beta * (math.exp(bound) - 1), rel=1e-5)
    assert kl[0, 1] > 0 and kl[0, 2] > 0  # ±100 nats from the reference too: clamped, still a penalty
    assert clamped_units(logp, old, ref).tolist() == [[False, True, True, True]]
    assert clamped_units(logp, old, None).tolist() == [[False, True, True, False]]


def test_a_step_counts_the_units_it_clamps(monkeypatch):
    """A reference 100 nats above every unit: every k3 log-ratio is clamped, and the step stays finite."""
    policy = unstable_policy()
    method = make_method("block_grpo", policy, {**UNSTABLE, "form": "uniform", "inner_iterations": 1}, seed=0)
    scored = method._reference_logp
    monkeypatch.setattr(method, "_reference_logp", lambda batch, key: scored(batch, key) + 100.0)
    stats = method.step([policy.encode(p) for p in PROMPTS[:2]], digit_share, 0).stats
    assert stats["clamped_frac"] == 1.0 and stats["skipped_steps"] == 0
    assert all(math.isfinite(stats[k]) for k in ("loss", "kl", "grad_norm", "update_norm")) and stats["update_norm"] > 0
    assert all(torch.isfinite(p).all() for p in policy.model.parameters())


def test_a_nan_reward_skips_the_step_and_too_many_in_a_row_stop_the_run():
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("block_grpo", policy, {**FAST, "max_skipped_steps": 2}, seed=0)
    prompts = [policy.encode(p) for p in PROMPTS]
    poisoned = lambda i, text: math.nan if i == 1 else digit_share(i, text)  # noqa: E731
    before = parameters(policy)
    stats = method.step(prompts, poisoned, 0).stats
    assert unchanged(policy, before) and stats["skipped_steps"] == 1 and stats["update_norm"] == 0
    assert method.step(prompts, digit_share, 1).stats["skipped_steps"] == 1  # a good step: the streak ends
    assert not unchanged(policy, before)
    moved = parameters(policy)
    assert method.step(prompts, poisoned, 2).stats["skipped_steps"] == 2
    with pytest.raises(NonFiniteError, match=r"block_grpo step 3 \(inner iteration 0\): loss is nan .*4 of this "
                                             r"step's rewards are not finite; 2 consecutive steps skipped"):
        method.step(prompts, poisoned, 3)
    assert unchanged(policy, moved)


def test_a_nan_gradient_skips_the_step_and_restores_earlier_inner_updates():
    """μ = 2: the first update is applied, the second's gradient is NaN; the step leaves the masters where it
    found them. With max_skipped_steps 1 the first such step stops the run."""
    for limit in (2, 1):
        policy = sharpen(build_policy(SMALL), std=0.1)
        method = make_method("block_grpo", policy, {**FAST, "inner_iterations": 2, "max_skipped_steps": limit},
                             seed=0)
        backwards = []

        def poison(gradient):  # one backward per inner iteration (one micro-batch): the second goes NaN
            backwards.append(not unchanged(policy, before))  # whether the first update has moved the policy
            return gradient * math.nan if len(backwards) % 2 == 0 else gradient

        policy.model.get_output_embeddings().weight.register_hook(poison)
        before = parameters(policy)
        if limit == 1:
            with pytest.raises(NonFiniteError, match=r"block_grpo step 0 \(inner iteration 1\): gradient norm is nan "
                                                     r"\(loss -?[0-9.e-]+\); 1 consecutive step skipped"):
                method.step([policy.encode(p) for p in PROMPTS], digit_share, 0)
        else:
            stats = method.step([policy.encode(p) for p in PROMPTS], digit_share, 0).stats
            assert stats["skipped_steps"] == 1 and stats["update_norm"] == 0 and math.isnan(stats["grad_norm"])
            assert method.state_dict()["skipped_steps"] == 1
        assert backwards == [False, True] and unchanged(policy, before)


def test_max_skipped_steps_is_validated():
    with pytest.raises(ConfigError, match="max_skipped_steps"):
        make_method("block_grpo", build_policy(SMALL), {"max_skipped_steps": 0}, seed=0)

