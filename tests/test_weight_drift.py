"""eval/weight_drift against its first definition: an fp32 start copy, the difference and its square out of place.

The runner now keeps a tensor bf16 holds exactly in bf16 and squares in place (host memory at the 7B width); the
logged number must not move by a bit, on weights bf16 holds (a bf16 checkpoint loaded in fp32) and on any other.
"""
import math

import pytest
import torch

from arena.model.tiny import TinyConfig, build_policy
from arena.rng import torch_generator
from arena.runner import initial_weights, weight_drift


def drift_oracle(model, start: dict[str, torch.Tensor]) -> float:
    """The first implementation, with a plain fp32 copy."""
    moved = total = 0.0
    for name, param in model.named_parameters():
        moved += float((param.detach().float() - start[name]).square().sum())
        total += float(start[name].square().sum())
    return math.sqrt(moved / total)


def model(bf16_exact: bool):
    policy = build_policy(TinyConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128))
    generator = torch_generator(3, 1)
    with torch.no_grad():
        for param in policy.model.parameters():
            param.normal_(0.0, 0.3, generator=generator)
            if bf16_exact:
                param.copy_(param.to(torch.bfloat16).float())
    return policy.model


@pytest.mark.parametrize("bf16_exact", [True, False])
def test_weight_drift_is_bit_identical_to_the_fp32_copy(bf16_exact):
    net = model(bf16_exact)
    oracle_start = {name: p.detach().clone() for name, p in net.named_parameters()}
    start = initial_weights(net)
    assert {t.dtype for t in start.values()} == {torch.bfloat16 if bf16_exact else torch.float32}
    generator = torch_generator(3, 2)
    with torch.no_grad():
        for param in net.parameters():  # a training step's change, in fp32 (no longer bf16-exact)
            param.add_(torch.randn(param.shape, generator=generator) * 1e-3)
    drift = weight_drift(net, start)
    assert drift == drift_oracle(net, oracle_start) and drift > 0
    for name, param in net.named_parameters():  # the copy was not squared in place
        assert torch.equal(start[name].float(), oracle_start[name]), name


def test_a_tensor_with_one_value_bf16_cannot_hold_stays_fp32():
    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.zeros(3, 1 << 22))  # more than one slice of the exactness test
    with torch.no_grad():
        module.w[2, -1] = 1 + 2**-20  # in the last slice
    assert initial_weights(module)["w"].dtype == torch.float32
    with torch.no_grad():
        module.w[2, -1] = 1 + 2**-7  # bf16's last bit: exact
    assert initial_weights(module)["w"].dtype == torch.bfloat16
