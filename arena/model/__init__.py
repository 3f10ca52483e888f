"""The model floor: the block-diffusion policy, its attention layouts, its sampler, the tiny model.

Imports point down only: ``layout`` <- ``policy`` <- ``sampler`` <- ``tiny``; this package's
``load_policy`` sits above them all and is the one entry point that knows the embedded models' names
(``tiny``, ``tiny-multiblock``, ``tiny-inblock``: ``arena.model.tiny.MODELS``).
"""
from __future__ import annotations


def load_policy(source: str, device: str | None = None, dtype=None):
    """An embedded model's name (its shipped checkpoint), a local Fast-dLLM v2 directory, or a hub id."""
    from arena.model.policy import load_checkpoint
    from arena.model.tiny import MODELS, shipped_checkpoint

    if source in MODELS:
        source = str(shipped_checkpoint(source))
    return load_checkpoint(source, device, dtype)
