"""The GRPO family: learning on a toy reward, mask keying across inner iterations, the μ=1 identity,
the frozen reference scored through a view, and two gloo processes computing what one computes."""
import datetime

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import build_policy
from conftest import SMALL, digit_share, sharpen
from methods import likelihood
from methods.base import COMMON_STATS, make_method
from methods.grpo import GRPOConfig, clipped_objective

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


def test_inner_iterations_draw_fresh_masks_shared_by_theta_and_theta_old(monkeypatch):
    calls = []
    original = likelihood.estimate

    def recording(name, policy, batch, key, **options):
        est = original(name, policy, batch, key, **options)
        calls.append((tuple(key), torch.is_grad_enabled(), est.masks.clone(), list(batch.sample_ids)))
        return est

    monkeypatch.setattr(likelihood, "estimate", recording)
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
    original = likelihood.estimate

    def recording(name, scorer, batch, key, **options):
        assert policy.model is trained, "the shared policy's model was swapped"
        scored.append(scorer.model)
        return original(name, scorer, batch, key, **options)

    monkeypatch.setattr(likelihood, "estimate", recording)
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
    assert {"loss", "frac_zero_std_groups", "clip_frac", "kl", "ratio_mean", "ratio_max", "estimator_std",
            "grad_norm", "completion_length", *COMMON_STATS} <= names


def _replica(rank: int, world: int, directory: str) -> None:
    torch.set_num_threads(1)  # the same CPU kernels in both runs, whatever the machine; no oversubscription
    dist.init_process_group("gloo", init_method=f"file://{directory}/grpo-store-{world}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        policy = sharpen(build_policy(SMALL), std=0.1)
        options = {**FAST, "lr": 1e-4, "estimator": "elbo", "beta": 0.05, "inner_iterations": 2}
        method = make_method("block_grpo", policy, options, seed=3)
        for step in range(2):
            result = method.step([policy.encode(p) for p in PROMPTS], digit_share, step)
        if rank == 0:
            torch.save({"params": {n: p.detach() for n, p in policy.model.named_parameters()},
                        "consumption": result.consumption, "stats": result.stats}, f"{directory}/grpo-{world}.pt")
    finally:
        dist.barrier()  # tear down together: a rank leaving early aborts gloo in the other ("terminate called")
        dist.destroy_process_group()


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
