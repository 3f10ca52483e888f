import pytest
import torch

from arena.tiny import TinyConfig, build_policy
from arena.rng import torch_generator

SMALL = TinyConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, block_size=4, sub_block=2)


def sharpen(policy, std: float = 0.25, seed: int = 7):
    """Re-initialise with a large std so that predictions are peaked and depend on the context."""
    generator = torch_generator(seed, 99)
    with torch.no_grad():
        for name, param in sorted(policy.model.named_parameters()):
            if "norm" not in name:
                param.normal_(0.0, std, generator=generator)
    return policy


@pytest.fixture(scope="session")
def tiny_policy():
    """A random-init tiny policy, block 4, sub-block 2, sharpened so that outputs vary with context."""
    return sharpen(build_policy(SMALL))


@pytest.fixture(scope="session")
def small_vocab_policy():
    """A policy whose model has only 8 output ids (tokens 0..7), for exact enumeration."""
    return sharpen(build_policy(SMALL, vocab=8), std=0.6)
