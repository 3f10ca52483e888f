"""Sharded training (FSDP2) and fp32 master weights.

- Two gloo ranks with ``sharding: fsdp`` compute what one unsharded process computes, with a
  frozen sharded reference (β > 0), μ = 2 inner iterations and micro-batches.
- A state saved by the two sharded ranks resumes on one rank and continues as the two do.
- bf16 weights: given the same completions, the sharded update stays within twice the distance of
  the unsharded update to itself with another micro-batch split.
- Master weights: the optimizer path equals plain fp32 AdamW on the same gradients (a second
  implementation), while AdamW directly on bf16 weights loses the update entirely.
"""
import contextlib
import dataclasses

import pytest
import torch
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from conftest import SMALL, digit_share, gloo_rank, sharpen

import methods.grpo
from arena.rng import torch_generator
from arena.model.sampler import Generation, SamplerConfig, generate
from arena.model.tiny import build_policy
from arena.config import ConfigError
from methods.base import make_method
from methods.fsdp import MasterWeights

PROMPTS = ["12+7=", "3+4=", "45+67=", "9+9="]
OPTIONS = {"group_size": 4, "max_new_tokens": 8, "lr": 1e-4, "clip_eps": 0.5, "estimator": "elbo", "draws": 2,
           "beta": 0.05, "inner_iterations": 2, "micro_batch": 4}
LR_STEPS = 2 * 2 * OPTIONS["lr"]  # 2 steps x μ = 2


def _policy(dtype):
    policy = sharpen(build_policy(SMALL), std=0.1)
    policy.model.to(dtype)
    return policy


def _run(rank: int, world: int, directory: str, tag: str, sharding: str, dtype, resume_from: str | None,
         micro_batch: int, rollouts: str | None) -> None:
    """Two steps of block_grpo (or only the second, resumed from a saved state); rank 0 saves the result.
    With ``rollouts``, every step trains on those completions instead of sampling its own."""
    torch.set_num_threads(1)  # the same CPU kernels on any machine; two ranks share two cores
    if rollouts:  # this spawned process's own copy of the module
        methods.grpo.generate = _replayer(torch.load(rollouts, weights_only=False))
    grouped = world > 1 or sharding == "fsdp"
    with gloo_rank(f"{directory}/store-{tag}", rank, world) if grouped else contextlib.nullcontext():
        policy = _policy(dtype)
        options = {**OPTIONS, "sharding": sharding, "micro_batch": micro_batch}
        method = make_method("block_grpo", policy, options, seed=3)
        first = 0
        if resume_from:  # the state of another world size, resharded by torch.distributed.checkpoint
            state = method.state_dict()
            dcp.load(state, checkpoint_id=f"{directory}/{resume_from}-state")
            method.load_state_dict(state)
            first = 1
        for step in range(first, 2):
            result = method.step([policy.encode(p) for p in PROMPTS], digit_share, step)
            if step == 0 and sharding == "fsdp":
                dcp.save(method.state_dict(), checkpoint_id=f"{directory}/{tag}-state")  # each rank its shards
        masters = {n: _whole(m) for n, m in method.state_dict()["params"].items()}
        if rank == 0:
            torch.save({"masters": masters, "consumption": result.consumption, "stats": result.stats},
                       f"{directory}/{tag}.pt")


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _spawn(directory, tag, world, sharding="none", dtype=torch.float32, resume_from=None, micro_batch=4,
           rollouts=None):
    mp.spawn(_run, args=(world, str(directory), tag, sharding, dtype, resume_from, micro_batch, rollouts),
             nprocs=world)
    return torch.load(directory / f"{tag}.pt", weights_only=False)


def _fixed_rollouts(directory) -> str:
    """G completions per prompt, sampled once in fp32; row i*G + g is prompt i (GRPO's global sample id)."""
    policy, group = _policy(torch.float32), OPTIONS["group_size"]
    prompts = [policy.encode(p) for p in PROMPTS for _ in range(group)]
    table = generate(policy, prompts, SamplerConfig(max_new_tokens=OPTIONS["max_new_tokens"], temperature=1.0), seed=0)
    torch.save(table, directory / "rollouts.pt")
    return str(directory / "rollouts.pt")


def _replayer(table: Generation):
    """A stand-in for ``generate`` that answers every row from ``table`` by its row id (no forwards)."""
    def replay(policy, prompts, config, seed, row_ids):
        assert [table.prompts[r] for r in row_ids] == prompts, "row ids are not the table's sample ids"
        pick = {f.name: [getattr(table, f.name)[r] for r in row_ids] for f in dataclasses.fields(Generation)
                if f.name != "forward_tokens"}
        return Generation(**pick)

    return replay


def _compare(a: dict, b: dict) -> torch.Tensor:
    assert a.keys() == b.keys()
    return torch.cat([(a[n].float() - b[n].float()).abs().flatten() for n in a])


@pytest.mark.slow
def test_two_sharded_ranks_match_one_process_and_resume_on_one(tmp_path):
    """fp32: forwards agree to float rounding; Adam turns rounding noise in exactly-zero gradients
    into +-lr steps (see test_grpo), so 99.9% of coordinates within 1e-7, all within 5% of the lr steps."""
    one = _spawn(tmp_path, "replica", 1)
    two = _spawn(tmp_path, "fsdp2", 2, sharding="fsdp")
    resumed = _spawn(tmp_path, "fsdp1-resumed", 1, sharding="fsdp", resume_from="fsdp2")

    a, b = one["consumption"], two["consumption"]
    assert (a.samples, a.tokens) == (b.samples, b.tokens)
    assert abs(one["stats"]["reward_mean"] - two["stats"]["reward_mean"]) < 1e-6
    assert abs(one["stats"]["kl"] - two["stats"]["kl"]) < 1e-5 and two["stats"]["kl"] > 0  # the reference is used
    # Adam is blind to a gradient scale error (a mean instead of a sum); the norm is not
    assert abs(two["stats"]["grad_norm"] / one["stats"]["grad_norm"] - 1) < 1e-5
    # update_norm: every shard's part, all-reduced (one shard alone is about 1/√2 of it)
    assert abs(two["stats"]["update_norm"] / one["stats"]["update_norm"] - 1) < 1e-2
    start = {n: p.detach() for n, p in _policy(torch.float32).model.named_parameters()}
    assert all(not torch.equal(one["masters"][n], start[n]) for n in start)
    for other in (two, resumed):
        differences = _compare(one["masters"], other["masters"])
        assert differences.max() < 0.05 * LR_STEPS
        assert (differences > 1e-7).float().mean() < 1e-3


@pytest.mark.slow
def test_sharded_bf16_compute_disagrees_no_more_than_bf16_with_itself(tmp_path):
    """bf16 weights: both modes train fp32 masters; FSDP all-gathers them in bf16 for compute.

    bf16 forwards round differently for different batch shapes: sampled tokens could differ, so all
    runs train on the same fixed completions, and the noise floor of the update is the same
    unsharded run with another micro-batch split. The sharded ranks also score θ_old and the
    reference over half-size batches, so they stray further: 1.0-1.6 times the floor at every
    quantile over three rollout sets; an update lost to bf16 is hundreds of times it."""
    rollouts = _fixed_rollouts(tmp_path)
    one = _spawn(tmp_path, "replica-bf16", 1, dtype=torch.bfloat16, rollouts=rollouts)
    floor = _spawn(tmp_path, "replica-bf16-micro8", 1, dtype=torch.bfloat16, micro_batch=8, rollouts=rollouts)
    two = _spawn(tmp_path, "fsdp2-bf16", 2, sharding="fsdp", dtype=torch.bfloat16, rollouts=rollouts)
    assert all(m.dtype == torch.float32 for m in two["masters"].values())
    assert one["stats"]["reward_mean"] == two["stats"]["reward_mean"]  # the sharded ranks replayed their rows
    levels = torch.tensor([0.5, 0.9, 0.99, 1.0], dtype=torch.float64)
    noise = torch.quantile(_compare(one["masters"], floor["masters"]).double()[:100_000], levels)
    sharded = torch.quantile(_compare(one["masters"], two["masters"]).double()[:100_000], levels)
    assert 0 < noise[0] and (sharded <= 2 * noise).all(), (sharded / LR_STEPS, noise / LR_STEPS)


def test_fsdp_needs_a_process_group_and_full_fine_tuning(monkeypatch):
    policy = _policy(torch.float32)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # accelerate's FSDP launcher config, silently unused
    with pytest.raises(ValueError, match="sharding: fsdp"):
        make_method("grpo", policy, {}, seed=0)
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    with pytest.raises(ValueError, match="torch.distributed"):
        make_method("grpo", policy, {"sharding": "fsdp"}, seed=0)
    with pytest.raises(ConfigError, match="LoRA"):
        make_method("grpo", policy, {"sharding": "fsdp", "trainable": "lora"}, seed=0)
    with pytest.raises(ConfigError, match="sharding"):
        make_method("grpo", policy, {"sharding": "zero3"}, seed=0)


def test_master_weights_equal_fp32_adamw_where_bf16_adamw_loses_the_update():
    shapes = [(64, 32), (32,)]
    start = [0.02 * torch.randn(s, generator=torch_generator(1, i)) for i, s in enumerate(shapes)]
    bf16 = [torch.nn.Parameter(t.to(torch.bfloat16)) for t in start]
    fp32 = [torch.nn.Parameter(t.to(torch.bfloat16).float()) for t in start]  # the same starting values
    naive = [torch.nn.Parameter(t.to(torch.bfloat16)) for t in start]
    master = MasterWeights(bf16)
    optimizers = [torch.optim.AdamW(params, lr=1e-6, weight_decay=0.01) for params in (master.masters, fp32, naive)]
    for step in range(20):
        grads = [torch.randn(s, generator=torch_generator(2, step, i)).to(torch.bfloat16) for i, s in enumerate(shapes)]
        for i, g in enumerate(grads):
            for micro in range(2):  # two micro-batches accumulate into the masters in fp32
                bf16[i].grad = g / 2
                master.accumulate()
            fp32[i].grad, naive[i].grad = g.float(), g.clone()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        master.publish()
    for m, reference, p, n, s in zip(master.masters, fp32, bf16, naive, start):
        assert torch.equal(m, reference)  # exactly fp32 AdamW
        assert torch.equal(p, m.to(torch.bfloat16))  # the model holds the rounded master
        assert (m != s.to(torch.bfloat16).float()).all()  # every master moved
        # AdamW on bf16 weights: the update is rounded away, except on the few weights below ~3e-4
        assert (n == s.to(torch.bfloat16)).float().mean() > 0.95
