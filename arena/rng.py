"""Keyed randomness: every random draw in arena comes from a generator built from explicit integers.

``key`` is a tuple of non-negative integers such as (seed, step, iteration, sample, block, draw).
Distinct keys give independent streams (numpy's SeedSequence hashing); the same key always gives
the same stream. Nothing here touches global RNG state.
"""
from __future__ import annotations

import hashlib

import numpy as np


def _seed_sequence(key: tuple[int, ...]) -> np.random.SeedSequence:
    if not key or any(int(k) < 0 for k in key):
        raise ValueError(f"a random key needs one or more non-negative integers, got {key}")
    return np.random.SeedSequence([int(k) for k in key])


def seed_of(*key: int) -> int:
    """A 63-bit seed derived from ``key`` (for torch.Generator.manual_seed and friends)."""
    return int(_seed_sequence(key).generate_state(1, np.uint64)[0] >> np.uint64(1))


def numpy_generator(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(_seed_sequence(key)))


def torch_generator(*key: int, device="cpu"):
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed_of(*key))
    return generator


def name_key(name: str) -> int:
    """A stable integer for a string (parameter names in noise keys); Python's hash() is salted."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=7).digest(), "little")
