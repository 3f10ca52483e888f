"""The model floor: the block-diffusion policy, its attention layouts, its sampler, the tiny model.

Imports point down only: ``layout`` <- ``policy`` <- ``sampler`` <- ``tiny``; this package's
``load_policy`` sits above them all and is the one entry point that knows the name ``tiny``.
"""
from __future__ import annotations


def load_policy(source: str, device: str | None = None, dtype=None):
    """``tiny`` (the shipped embedded checkpoint), a local Fast-dLLM v2 directory, or a hub id."""
    from arena.model.policy import load_checkpoint

    if source == "tiny":
        from arena.model.tiny import shipped_checkpoint

        source = str(shipped_checkpoint())
    return load_checkpoint(source, device, dtype)
