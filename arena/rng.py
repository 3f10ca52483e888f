"""Keyed randomness: every random draw in arena comes from a generator built from explicit integers.

``key`` is a tuple of non-negative integers such as (seed, step, iteration, sample, block, draw).
Distinct keys give independent streams (numpy's SeedSequence hashing); the same key always gives
the same stream. Nothing here touches global RNG state.

Where a key needs a constant to tell one kind of draw from another (a *domain*), the constant is named in one of
the enums below, one per key family: a domain is distinct within its family (the keys that begin alike), and
the integers are the ones every published result was drawn with, so none may change. Keys without a domain:
GRPO's rollouts (run seed, step), its estimator masks (run seed, step, iteration, sample, ...), the sampler's rows
(decoding seed, row), LoRA's initialisation (seed, name_key(parameter)), a tuning trial's sampler seed
(tune seed, name_key(arm), trial) and the task data (seed, split, ...).
"""
from __future__ import annotations

import hashlib
from enum import IntEnum, unique

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
    """A torch.Generator on ``device`` seeded from ``key``: the same key gives other numbers on another kind of
    device. The meta device (shapes without values) has no generator of its own and draws nothing: the CPU's
    stands in."""
    import torch

    device = torch.device(device)
    generator = torch.Generator(device="cpu" if device.type == "meta" else device)
    generator.manual_seed(seed_of(*key))
    return generator


def name_key(name: str) -> int:
    """A stable integer for a string (parameter names in noise keys); Python's hash() is salted."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=7).digest(), "little")


@unique
class RunKey(IntEnum):
    """The integer after the run seed in a training run's keys."""

    ES_NOISE = 1  # (seed, ES_NOISE, step, pair, name_key(parameter)): ES's noise of a member pair
    ES_DECODE = 2  # (seed, ES_DECODE, step): the decoding seed every ES member of a step shares
    TRAIN_PROMPTS = 7  # (seed, TRAIN_PROMPTS, step): the step's training prompts, the same for every arm


@unique
class EvaluationKey(IntEnum):
    """The integer after the evaluation seed in an evaluation's keys."""

    MEASURE = 0  # (seed, MEASURE[, draw]): the decoding seed of the measuring samples
    SELECT = 1  # (seed, SELECT[, draw]): the hard-subset selection samples; (prompt seed, SELECT): their tie-break
    DRAW_PROMPTS = 2  # (seed, DRAW_PROMPTS, draw): the prompts of evaluation draws 1, 2, ... (draw 0: the seed's)


@unique
class StatsKey(IntEnum):
    """The first integer of the report's keys (they have no seed: every arm resamples alike)."""

    PROMPT_BOOTSTRAP = 12  # (PROMPT_BOOTSTRAP, draw): the resampled prompts of the evaluation variance


@unique
class MaskKey(IntEnum):
    """The last integer of a block estimator's mask keys (seed, step, iteration, sample, draw, ·)."""

    LEVEL = 0  # the masking level of each sub-block
    ORDER = 1  # the order in which a sub-block's positions are masked
    OFFSET = 2  # ebpo: the cyclic offset that places a sequence's block levels in their strata


@unique
class D1Key(IntEnum):
    """The last integer of d1's mask keys (seed, step, iteration, sample, ·)."""

    PROMPT_MASK = 0  # which prompt tokens d1 masks


@unique
class BenchKey(IntEnum):
    """The integer after the seed in the estimator bench's mask keys, in place of a step."""

    MEASURED = 0  # (seed, MEASURED, 0): the masks of every measured setting
    REFERENCE = 1  # (seed, REFERENCE, call): the Monte Carlo reference's, apart from the measured ones


@unique
class PretrainKey(IntEnum):
    """The integer after the pretraining seed in an embedded model's pretraining keys."""

    INIT = 0  # (seed, INIT): the initial weights
    LEVELS = 1  # (seed, LEVELS, step): the difficulty levels of a step's batch
    MASKS = 2  # (seed, MASKS, step): the diffusion masks of a step
    TEACHER = 3  # (seed, TEACHER, step): the noisy teacher's answers of a step
