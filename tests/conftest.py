import contextlib
import datetime
import json

import pytest
import torch
import torch.distributed as dist

from arena.model.tiny import TinyConfig, build_policy
from arena.processes import leave_process_group
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


class StopShifted:
    """``policy`` with ``shift`` added to the stop token's logit everywhere (+40: it stops at once; -inf: never)."""

    def __init__(self, policy, shift: float):
        self.policy, self.shift = policy, shift

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def logits(self, hidden):
        logits = self.policy.logits(hidden)
        logits[..., self.policy.eos_id] += self.shift
        return logits


@contextlib.contextmanager
def gloo_rank(store: str, rank: int, world: int, seconds: int = 120):
    """Run the block as rank ``rank`` of a ``world``-process gloo group, then end this spawned process.

    After a success the ranks leave together and the process ends by ``os._exit`` (``leave_process_group``):
    a plain return lets the interpreter shut down under gloo's worker threads, which aborts it ('terminate
    called without an active exception'; one CI run in several). After an error the group is torn down and
    the error raised, for ``mp.spawn`` to report."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=seconds))
    try:
        yield
    except BaseException:
        dist.destroy_process_group()
        raise
    leave_process_group(0)


def digit_share(index: int, text: str) -> float:
    """Toy reward with a known optimum: all completion characters digits."""
    return sum(c.isdigit() for c in text) / max(1, len(text))


def share_of_ones(index: int, text: str) -> float:
    """Toy reward with a known optimum: every completion character a '1'."""
    return text.count("1") / max(1, len(text))


@pytest.fixture(scope="session")
def tiny_policy():
    """A random-init tiny policy, block 4, sub-block 2, sharpened so that outputs vary with context."""
    return sharpen(build_policy(SMALL))


@pytest.fixture(scope="session")
def small_vocab_policy():
    """A policy whose model has only 8 output ids (tokens 0..7), for exact enumeration."""
    return sharpen(build_policy(SMALL, vocab=8), std=0.6)


def write_records(tmp_path, suffix: str, rows: list[dict]):
    """Rows in a public dataset's file format (.jsonl, .json or .parquet), as the loaders read them."""
    path = tmp_path / f"rows{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        import pandas as pd

        pd.DataFrame(rows).to_parquet(path)
    return path
