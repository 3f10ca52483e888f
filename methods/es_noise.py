"""ES's noise kinds: ε_j of a parameter, regenerated from the key (seed, ES_NOISE, step, j, name_key(name)) and
never stored. The name in the key keeps same-shaped tensors independent.

The noise is drawn on the parameter's device, from a generator of that device keyed by those integers, so it never
travels between host and device. The CPU is the reference (the tests run there, and its draws do not depend on the
machine). On an accelerator the same key gives other numbers than on the CPU, and CUDA's normals depend on the GPU
model too (the kernel's launch shape), so an ES run is reproducible on the same kind of device only
(docs/performance.md, "What is device-specific").

``full`` noise is dense: every coordinate standard normal. ``lowrank`` noise (EGGROLL) is E = A Bᵀ/√r with
A (out, r), B (in, r) for 2-D tensors, unit variance per coordinate, r(out + in) draws instead of out·in; trainable
``nn.Linear`` weights then take it in the forward pass (y += σ s x B Aᵀ/√r, a hook) and are never written, and
every other tensor takes it dense, as ``full`` noise.
"""
from __future__ import annotations

import math

import torch

from arena.rng import RunKey, name_key, torch_generator


def normal(seed: int, step: int, j: int, name: str, shape, device) -> torch.Tensor:
    """Dense standard normal noise of one parameter, fp32 on ``device``."""
    generator = torch_generator(seed, RunKey.ES_NOISE, step, j, name_key(name), device=device)
    return torch.randn(tuple(shape), generator=generator, device=device)


class FullNoise:
    """Dense noise for every tensor."""

    in_forward = False  # no parameter takes its noise in the forward pass

    def __init__(self, seed: int):
        self.seed = seed

    def dense(self, step: int, j: int, name: str, shape, device="cpu") -> torch.Tensor:
        return normal(self.seed, step, j, name, shape, device)


class LowRankNoise:
    """E = A Bᵀ/√r for 2-D tensors (dense for the others); ``hook`` adds it to an nn.Linear's output."""

    in_forward = True  # trainable nn.Linear weights take their noise in the forward pass

    def __init__(self, seed: int, rank: int):
        self.seed, self.rank = seed, rank

    def factors(self, step: int, j: int, name: str, shape, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """A (out, r) and B (in, r), standard normal, from one generator."""
        generator = torch_generator(self.seed, RunKey.ES_NOISE, step, j, name_key(name), device=device)
        return (torch.randn(shape[0], self.rank, generator=generator, device=device),
                torch.randn(shape[1], self.rank, generator=generator, device=device))

    def dense(self, step: int, j: int, name: str, shape, device="cpu") -> torch.Tensor:
        if len(shape) != 2:
            return normal(self.seed, step, j, name, shape, device)
        a, b = self.factors(step, j, name, shape, device)
        return a @ b.T / math.sqrt(self.rank)

    def hook(self, step: int, j: int, name: str, weight: torch.Tensor, scale: float):
        """A forward hook adding ``scale`` x B Aᵀ/√r to the output of the nn.Linear whose weight is ``weight``."""
        a, b = self.factors(step, j, name, weight.shape, weight.device)
        a, b = (a * (scale / math.sqrt(self.rank))).to(weight), b.to(weight)

        def add(module, inputs, output):
            return output + (inputs[0] @ b) @ a.T

        return add


def make_noise(kind: str, seed: int, rank: int) -> FullNoise | LowRankNoise:
    return LowRankNoise(seed, rank) if kind == "lowrank" else FullNoise(seed)
