"""ES (methods/es.py): the known pitfalls of ES on LLMs as tests (docs/design.md: restore by copy, accumulate
updates in fp32, key the noise by parameter name), plus the update's size,
its direction on a toy objective, learning on the tiny model, and two gloo processes = one."""
import copy
import math
import pathlib
import statistics
import types

import pytest
import torch
import torch.multiprocessing as mp
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from arena.rng import numpy_generator, torch_generator
from arena.model.sampler import SamplerConfig, generate
from arena.model.tiny import build_policy
from conftest import SMALL, gloo_rank, share_of_ones, sharpen
from arena.config import ConfigError
from methods.base import make_method
from methods.es import SHAPING

FAST = {"population": 4, "prompts_per_member": 2, "max_new_tokens": 8, "sigma": 0.05}
TRAIN = ["12+7=", "3+4=", "45+67=", "8+9="]
HELDOUT = ["5+6=", "31+2=", "70+14=", "9+99=", "2+2=", "63+8=", "1+40=", "77+7="]


def code_mean(index: int, text: str) -> float:
    """A dense toy reward: every changed character changes it."""
    return sum(map(ord, text)) / (127 * max(1, len(text)))


def bits(policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().contiguous().view(torch.uint8).clone() for n, p in policy.model.named_parameters()}


def flat_trainable(policy) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for _, p in policy.model.named_parameters() if p.requires_grad])


def encoded(policy, texts):
    return [policy.encode(t) for t in texts]


def norm_c(shaped: torch.Tensor, antithetic: bool) -> float:
    """‖c‖₂ of the docstring: c_j sums the signed shaped fitnesses of the members sharing ε_j."""
    c = shaped[0::2] - shaped[1::2] if antithetic else shaped
    return float(c.norm())


# ---- pitfall 1: restore by copy from a master, bit-exact in fp32 and bf16


@pytest.mark.parametrize("trainable", ["full", "lora"])
@pytest.mark.parametrize("noise", ["full", "lowrank"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_perturb_restore_is_bit_exact_after_many_members(dtype, noise, trainable):
    policy = sharpen(build_policy(SMALL), std=0.1)
    policy.model.to(dtype)
    method = make_method("es", policy, {"noise": noise, "trainable": trainable, "sigma": 0.01}, seed=3)
    ids = torch.tensor([policy.encode("12+7=")])
    forward = torch.no_grad()(lambda: policy.model(ids).logits)
    logits, before = forward(), bits(policy)
    for member in range(24):
        with method.ask(step=member // 8, member=member):
            assert not torch.equal(forward(), logits), "the member is not perturbed"
    assert all(torch.equal(before[n], after) for n, after in bits(policy).items())
    assert torch.equal(forward(), logits), "a low-rank hook outlived its member"


def test_bf16_updates_accumulate_in_fp32():
    """Pitfall 2: steps far below bf16 resolution add up in the fp32 master, and the weights follow it."""
    policy = build_policy(SMALL)
    policy.model.to(torch.bfloat16)
    method = make_method("es", policy, {"population": 4, "alpha": 1e-4}, seed=0)
    start = {n: t.clone() for n, t in method.master.items()}
    for step in range(20):
        method.tell(step, torch.tensor([3.0, 0.0, 2.0, 1.0], dtype=torch.float64))  # centered ranks
    for name, param in method.params:
        assert torch.equal(param, method.master[name].to(torch.bfloat16)), name
    moved = sum(int((method.master[n] != start[n]).sum()) for n in start)
    assert moved == sum(t.numel() for t in start.values())


# ---- shaping: ties averaged, so equal fitnesses give exactly no update


@pytest.mark.parametrize("shaping", sorted(SHAPING))
def test_equal_fitness_gives_exactly_zero_update(shaping):
    equal = torch.full((7,), 0.1, dtype=torch.float64)
    assert torch.equal(SHAPING[shaping](equal), torch.zeros_like(equal))
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("es", policy, {**FAST, "shaping": shaping}, seed=0)
    before = bits(policy)
    result = method.step(encoded(policy, TRAIN), lambda i, text: 0.1, step=0)
    assert result.stats["update_norm"] == 0.0
    assert all(torch.equal(before[n], after) for n, after in bits(policy).items())


@pytest.mark.parametrize("shaping", sorted(SHAPING))
def test_shaping_does_not_depend_on_member_order(shaping):
    fitness = torch.tensor([0.5, 0.0, 0.5, 0.25, 0.0, 0.5], dtype=torch.float64)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    assert torch.equal(SHAPING[shaping](fitness)[order], SHAPING[shaping](fitness[order]))
    shaped = SHAPING[shaping](fitness)
    assert shaped[0] == shaped[2] == shaped[5] and shaped[1] == shaped[4]
    assert abs(float(shaped.sum())) < 1e-12


# ---- the size of one update, as the docstring states it


@pytest.mark.parametrize("noise", ["full", "lowrank"])
@pytest.mark.parametrize("shaping", sorted(SHAPING))
@pytest.mark.parametrize("antithetic", [True, False])
def test_per_coordinate_update_size(noise, shaping, antithetic):
    """A coordinate moves with std (α/n)‖c‖₂, over σ unless α absorbs it; ‖c‖₂² within the stated bound."""
    n, alpha, sigma = 16, 1e-3, 0.02
    fitness = torch.from_numpy(numpy_generator(5).permutation(n).astype("float64"))
    shaped = SHAPING[shaping](fitness)
    bound = {("centered_rank", False): n / 4, ("centered_rank", True): n / 2,
             ("zscore", False): n, ("zscore", True): 2 * n}[shaping, antithetic]
    assert norm_c(shaped, antithetic) ** 2 <= bound * (1 + 1e-12)
    moves, norms = {}, {}
    for absorbs in (True, False):
        policy = build_policy(SMALL)
        options = {"population": n, "alpha": alpha, "sigma": sigma, "alpha_absorbs_sigma": absorbs,
                   "antithetic": antithetic, "shaping": shaping, "noise": noise}
        method = make_method("es", policy, options, seed=1)
        before = flat_trainable(policy)
        method.tell(step=0, fitness=fitness)
        norms[absorbs] = method.movement.stats()["update_norm"]
        moves[absorbs] = flat_trainable(policy) - before
    expected = alpha / n * norm_c(shaped, antithetic)
    tolerance = 0.03 if noise == "full" else 0.1  # 87k coordinates; low-rank ones are correlated
    assert moves[True].std().item() == pytest.approx(expected, rel=tolerance)
    assert moves[False].std().item() == pytest.approx(expected / sigma, rel=tolerance)
    assert norms[False] == pytest.approx(norms[True] / sigma, rel=1e-6)


@pytest.mark.parametrize("noise", ["full", "lowrank"])
def test_default_step_moves_no_weight_more_than_2_5_percent_of_its_scale(noise):
    """The docstring's promise for the defaults, under the fitnesses that maximise ‖c‖₂ (pairs best/worst)."""
    policy = build_policy(SMALL)
    method = make_method("es", policy, {"noise": noise}, seed=0)
    n = method.config.population
    fitness = torch.tensor([n - m // 2 if m % 2 == 0 else m // 2 for m in range(n)], dtype=torch.float64)
    before = {name: p.detach().clone() for name, p in method.params}
    method.tell(step=0, fitness=fitness)
    for name, param in method.params:
        scale = max(before[name].pow(2).mean().sqrt().item(), 0.02)
        assert (param - before[name]).abs().max().item() <= 0.025 * scale, name


# ---- pitfall 3: keyed noise, independent across same-shaped tensors


@pytest.mark.parametrize("noise", ["full", "lowrank"])
def test_noise_is_keyed_and_differs_between_same_shaped_tensors(noise):
    make = lambda: make_method("es", build_policy(SMALL), {"noise": noise}, seed=11)  # noqa: E731
    method = make()
    q0, q1 = "model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.weight"
    a, b = method.noise.dense(4, 2, q0, (64, 64)), method.noise.dense(4, 2, q1, (64, 64))
    assert torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].abs() < 0.08  # 5 std at 4096 draws
    assert torch.equal(make().noise.dense(4, 2, q0, (64, 64)), a)
    assert not torch.equal(method.noise.dense(5, 2, q0, (64, 64)), a) and not torch.equal(method.noise.dense(4, 3, q0, (64, 64)), a)


class Transfers(TorchDispatchMode):
    """Records every op whose tensors (inputs and outputs) lie on more than one device: a copy between devices."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in pytree.tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        if len({t.device.type for t in tensors}) > 1:
            self.seen.append((str(func), sorted({str(t.device) for t in tensors})))
        return out


@pytest.mark.parametrize("noise", ["full", "lowrank"])
def test_noise_never_leaves_the_parameters_device(noise):
    """Every parameter on the meta device (shapes without values): a member's perturbation, its restore and the
    update draw their noise there, so no op copies a tensor between the CPU and the parameters' device (noise
    drawn on the CPU and moved would). The update's statistics (values) are watched by a stub here."""
    policy = build_policy(SMALL)
    policy.model.to("meta")
    method = make_method("es", policy, {**FAST, "noise": noise}, seed=0)
    changed = []
    method.movement = types.SimpleNamespace(begin=lambda: None, add=lambda name, change: changed.append(change))
    with Transfers() as transfers:
        for member in range(2):
            with method.ask(step=0, member=member):
                pass
        method.tell(0, torch.tensor([3.0, 0.0, 2.0, 1.0], dtype=torch.float64))
    assert transfers.seen == []
    assert len(changed) == len(method.params) and {c.device.type for c in changed} == {"meta"}
    assert all(p.device.type == "meta" for _, p in method.params)


# ---- direction: the ES estimate aligns with a known gradient


def toy_policy():
    layer = torch.nn.Linear(16, 8)
    with torch.no_grad():
        for param in layer.parameters():
            param.normal_(0.0, 0.5, generator=torch_generator(0, 1, param.dim()))
    return types.SimpleNamespace(model=torch.nn.Sequential(layer))


@pytest.mark.parametrize("noise", ["full", "lowrank"])
def test_es_estimate_aligns_with_the_gradient_on_a_toy(noise):
    """Population 512 (256 antithetic pairs), 136 parameters, σ = 1e-3: cosine > 0.7 (the expected
    cosine of a Gaussian-direction estimate with N pairs in d dimensions is about √(N/(N+d)) = 0.8)."""
    x, y = torch.randn(32, 16, generator=torch_generator(0, 2)), torch.randn(32, 8, generator=torch_generator(0, 3))
    policy = toy_policy()
    objective = lambda: -(policy.model(x) - y).pow(2).mean()  # noqa: E731  (forward: low-rank hooks apply)
    objective().backward()
    gradient = torch.cat([p.grad.flatten() for p in policy.model.parameters()])
    options = {"population": 512, "sigma": 1e-3, "alpha": 1.0, "alpha_absorbs_sigma": False,
               "shaping": "zscore", "noise": noise}
    method = make_method("es", policy, options, seed=0)
    fitness = torch.zeros(512, dtype=torch.float64)
    with torch.no_grad():
        for member in range(512):
            with method.ask(step=0, member=member):
                fitness[member] = objective().item()
    before = flat_trainable(policy)
    method.tell(0, fitness)
    assert torch.nn.functional.cosine_similarity(flat_trainable(policy) - before, gradient, dim=0) > 0.7


# ---- learning: a few steps on the tiny model raise a toy reward on held-out prompts


def heldout_reward(policy) -> float:
    out = generate(policy, encoded(policy, HELDOUT), SamplerConfig(max_new_tokens=8), seed=123)
    return sum(code_mean(i, t) for i, t in enumerate(out.texts)) / len(HELDOUT)


def test_a_few_steps_raise_the_reward_on_fresh_prompts():
    """5 steps of 8 members on 4 prompts; held-out greedy reward 0.55 -> 0.70-0.73 for seeds 0-2."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    options = {"population": 8, "sigma": 0.05, "alpha": 0.2, "prompts_per_member": 4, "max_new_tokens": 8}
    method = make_method("es", policy, options, seed=0)
    before = heldout_reward(policy)
    for step in range(5):
        result = method.step(encoded(policy, TRAIN), code_mean, step)
        assert result.consumption.samples == 8 * 4
    after = heldout_reward(policy)
    assert after > before + 0.08, (before, after)


# ---- options: every option runs from the registry


@pytest.mark.parametrize("options", [
    {"trainable": "lora", "noise": "lowrank", "shaping": "zscore"},
    {"trainable": "lora", "antithetic": False, "temperature": 0.7, "weight_decay": 0.01},
    {"noise": "lowrank", "noise_rank": 2, "alpha_absorbs_sigma": False, "alpha": 1e-4, "prompts_per_member": None},
])
def test_options_run_and_move_the_trainable_parameters(options):
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("es", policy, {**FAST, **options}, seed=0)
    before = flat_trainable(policy)
    result = method.step(encoded(policy, TRAIN[:3]), code_mean, step=0)
    assert result.consumption.samples == 4 * (method.config.prompts_per_member or 3)
    assert all(math.isfinite(v) for v in result.stats.values()) and result.stats["fitness_std"] > 0
    assert not torch.equal(flat_trainable(policy), before)


def test_antithetic_population_must_be_even():
    with pytest.raises(ConfigError, match="population"):
        make_method("es", build_policy(SMALL), {"population": 5}, seed=0)


# ---- across processes: two gloo ranks reach what one process reaches; drift fails loudly


def _replica(rank: int, world: int, directory: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(f"{directory}/store-{world}", rank, world):
        policy = sharpen(build_policy(SMALL), std=0.1)
        method = make_method("es", policy, {**FAST, "checksum_every": 1}, seed=0)
        prompts = encoded(policy, TRAIN)
        for step in range(3):
            method.step(prompts, share_of_ones, step)
        if rank == 0:
            torch.save(method.state_dict(), f"{directory}/theta-{world}.pt")
        if world > 1:
            if rank == 1:  # one ulp of drift in one weight of one replica
                state = method.state_dict()
                weight = next(iter(state["theta"].values())).view(-1)
                weight[0] = torch.nextafter(weight[0], torch.tensor(1.0))
                method.load_state_dict(state)
            try:
                method.step(prompts, share_of_ones, 3)
            except RuntimeError as error:
                pathlib.Path(directory, f"drift-{rank}.txt").write_text(str(error))


@pytest.mark.slow
def test_two_gloo_processes_reach_the_same_parameters_as_one(tmp_path):
    for world in (1, 2):
        mp.spawn(_replica, args=(world, str(tmp_path)), nprocs=world)
    one, two = torch.load(tmp_path / "theta-1.pt"), torch.load(tmp_path / "theta-2.pt")
    assert one["theta"].keys() == two["theta"].keys()
    for name in one["theta"]:
        assert torch.equal(one["theta"][name], two["theta"][name]), name
    for rank in (0, 1):
        assert "drifted apart at step 3" in (tmp_path / f"drift-{rank}.txt").read_text()


# ---- diagnostics: does the population see a signal?


def test_tied_pairs_and_cosine_on_constructed_values():
    from methods.es_stats import cosine, tied_pairs

    assert tied_pairs(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.0, 0.0], dtype=torch.float64)) == 0.75
    assert tied_pairs(torch.tensor([0.0, 0.125, 0.25, 0.375], dtype=torch.float64)) == 0.0
    assert cosine(-6.0, 4.0, 9.0) == -1.0 and cosine(0.0, 4.0, 9.0) == 0.0
    assert cosine(1.0, 0.0, 9.0) is None  # a zero update has no direction


def recording(reward):
    """A reward function that keeps what it returned, in call order (members in order, prompts in order)."""
    asked = []

    def recorded(index, text):
        asked.append(reward(index, text))
        return asked[-1]

    return recorded, asked


def test_step_diagnostics_match_a_recomputation_from_outside():
    """tied_pairs from the fitnesses rebuilt out of the rewards the step asked for, σ over each tensor's RMS
    from the parameters, and update_cosine from the parameters before and after two steps."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    options = {**FAST, "population": 8}
    method = make_method("es", policy, options, seed=0)
    prompts = encoded(policy, TRAIN[:2])
    snapshots = [flat_trainable(policy).double()]
    rms = [float(p.detach().double().square().mean().sqrt()) for _, p in policy.model.named_parameters()]
    results = []
    for step in range(2):
        recorded, asked = recording(share_of_ones)
        results.append(method.step(prompts, recorded, step))
        snapshots.append(flat_trainable(policy).double())
        fitness = torch.tensor(asked, dtype=torch.float64).view(8, 2).mean(1)
        expected_ties = float((fitness[0::2] == fitness[1::2]).double().mean())
        assert results[-1].stats["tied_pairs"] == expected_ties
        assert results[-1].stats["fitness_std"] == pytest.approx(float(fitness.std(correction=0)), abs=1e-12)
    first, second = results[0].stats, results[1].stats
    ratios = sorted(0.05 / r for r in rms if r > 0)
    assert first["sigma_rms_min"] == pytest.approx(ratios[0], rel=1e-9)
    assert first["sigma_rms_max"] == pytest.approx(ratios[-1], rel=1e-9)
    assert first["sigma_rms_median"] == pytest.approx(statistics.median(ratios), rel=1e-9)
    assert "update_cosine" not in first  # nothing to compare the first update with
    a, b = snapshots[1] - snapshots[0], snapshots[2] - snapshots[1]
    assert second["update_cosine"] == pytest.approx(float(a @ b / (a.norm() * b.norm())), rel=1e-5, abs=1e-7)


def test_a_population_with_no_signal_reads_as_all_pairs_tied_and_no_update():
    """A reward that no perturbation changes: every pair tied, fitness SD 0, no move (many ties = no signal)."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("es", policy, FAST, seed=0)
    result = method.step(encoded(policy, TRAIN[:2]), lambda index, text: 0.5, step=0)
    assert result.stats["tied_pairs"] == 1.0 and result.stats["fitness_std"] == 0.0
    assert result.stats["update_norm"] == 0.0


def test_update_cosine_survives_a_resume():
    """The previous update travels in the state: a resumed method reports the same cosine."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("es", policy, FAST, seed=0)
    prompts = encoded(policy, TRAIN[:3])
    method.step(prompts, code_mean, 0)
    twin_policy = copy.deepcopy(policy)
    twin = make_method("es", twin_policy, FAST, seed=0)
    twin.load_state_dict(copy.deepcopy(method.state_dict()))
    assert method.step(prompts, code_mean, 1).stats["update_cosine"] == twin.step(prompts, code_mean, 1).stats[
        "update_cosine"]


# ---- the options that decide ES's regime


def test_relative_noise_perturbs_each_tensor_by_sigma_times_its_rms_and_steps_alike():
    """sigma_scale: relative: inside a member each tensor's perturbation has RMS ≈ σ·RMS(θ_t) (statistically,
    over its coordinates), restore stays bit-exact, and the update of tensor t is the absolute update of the
    same fitnesses times RMS(θ_t)."""
    policy = sharpen(build_policy(SMALL), std=0.1)
    method = make_method("es", policy, {**FAST, "sigma": 0.01, "sigma_scale": "relative"}, seed=3)
    rms = method.rms()
    method.set_scales(rms, 0)
    before = bits(policy)
    with method.ask(0, 1):
        for name, param in method.params:
            if param.numel() >= 4096:  # enough coordinates for a 5% statistical tolerance
                moved = (param.detach().double() - method.master[name].double()).square().mean().sqrt()
                assert float(moved) == pytest.approx(0.01 * rms[name], rel=0.05), name
    assert all(torch.equal(before[n], bits(policy)[n]) for n in before)

    fitness = torch.tensor([3.0, 0.0, 2.0, 1.0], dtype=torch.float64)
    changes = {}
    for scale in ("absolute", "relative"):
        # α = 1: changes far above the rounding of θ + Δθ into fp32
        twin = make_method("es", sharpen(build_policy(SMALL), std=0.1), {**FAST, "alpha": 1.0, "sigma_scale": scale},
                           seed=3)
        twin.set_scales(twin.rms(), 0)
        start = {n: twin.master[n].clone() for n, _ in twin.params}
        twin.tell(0, fitness)
        changes[scale] = {n: twin.master[n] - start[n] for n in start}
    for name, change in changes["relative"].items():
        torch.testing.assert_close(change, changes["absolute"][name] * rms[name], rtol=1e-4, atol=1e-6)


def test_relative_noise_is_refused_with_lora_and_names_zero_rms_tensors():
    with pytest.raises(ConfigError, match="sigma_scale: relative noise scales"):
        make_method("es", build_policy(SMALL), {"sigma_scale": "relative", "trainable": "lora"}, seed=0)
    policy = sharpen(build_policy(SMALL), std=0.1)  # the unsharpened model's biases are 0: refused as well
    method = make_method("es", policy, {**FAST, "sigma_scale": "relative"}, seed=0)
    rms = dict(method.rms(), **{"model.norm.weight": 0.0})
    with pytest.raises(ValueError, match="RMS 0 at step 4: model.norm.weight"):
        method.set_scales(rms, 4)


def test_samples_per_member_decode_every_prompt_k_times_and_need_sampling():
    policy = sharpen(build_policy(SMALL), std=0.1)
    options = {**FAST, "samples_per_member": 3, "temperature": 1.0}
    method = make_method("es", policy, options, seed=0)
    indices = []
    result = method.step(encoded(policy, TRAIN), lambda index, text: indices.append(index) or code_mean(index, text), 0)
    assert result.consumption.samples == 4 * 2 * 3  # members x prompts_per_member x samples
    assert indices == [i for _ in range(4) for i in (0, 0, 0, 1, 1, 1)]  # each prompt k times, per member
    assert len({c["text"] for c in result.completions}) > 2  # sampled, not k copies
    with pytest.raises(ConfigError, match="samples_per_member: 3 samples per prompt need temperature > 0"):
        make_method("es", build_policy(SMALL), {**options, "temperature": 0.0}, seed=0)
    with pytest.raises(ConfigError, match="samples_per_member: must be >= 1"):
        make_method("es", build_policy(SMALL), {"samples_per_member": 0}, seed=0)


def test_decayed_step_size_is_the_constant_update_at_the_decayed_alpha():
    """With the same fitnesses, the update at step t under alpha_decay_from: k equals a constant-α ES's at
    α·min(1, √(k/(t+1))), to the bit in fp32, weight decay included: the tuned α for k steps, then 1/√t; leaving
    the option out keeps the archived config hashes (an ES run registered before it is found again)."""
    from arena.study import load_study

    fitness = torch.tensor([3.0, 0.0, 2.0, 1.0], dtype=torch.float64)
    for k, step, factor in ((1, 0, 1.0), (1, 3, 0.5), (4, 2, 1.0), (4, 15, 0.5)):
        moved = {}
        for name, options in (("decayed", {"alpha": 0.02, "alpha_decay_from": k}),
                              ("constant", {"alpha": 0.02 * factor})):
            policy = sharpen(build_policy(SMALL), std=0.1)
            method = make_method("es", policy, {**FAST, **options, "weight_decay": 0.01}, seed=0)
            method.tell(step, fitness)
            moved[name] = flat_trainable(policy)
        assert torch.equal(moved["decayed"], moved["constant"]), (k, step)
    with pytest.raises(ConfigError, match="alpha_decay_from"):
        make_method("es", build_policy(SMALL), {**FAST, "alpha_decay_from": 0}, seed=0)
    es = next(run for run in load_study("studies/confirm/es_vs_blockgrpo.yaml").runs() if run.arm == "es")
    assert es.seed == 20 and es.config_hash == "8ef113a8f610"  # archive/es_vs_blockgrpo_confirm, tagged so
