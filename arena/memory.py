"""GPU memory faults and deterministic kernels: the two device settings a run can get wrong at scale.

Out of memory. torch raises ``torch.OutOfMemoryError`` from deep inside a kernel, with a page of allocator
statistics and nothing that says which part of a step asked for the memory or what to change. A method marks
its phases (``phase``: rollout, scoring, backward, optimizer; the runner marks evaluation), the innermost
mark naming the error, and the runner turns the error into one ``MemoryFault`` line (``out_of_memory``): the
step or evaluation mark, the phase, the setting that sizes that phase's memory, and where the rerun resumes.
The run is marked failed with its checkpoint in place: the same command, given more memory (fewer ``--jobs``
per device, a larger device), resumes it from that checkpoint; lowering the setting changes the run's config hash,
so the run starts over as a new one.

Deterministic kernels (``train.deterministic``): ``deterministic_kernels`` sets torch's switch for the run
(and unsets it for a run without it, since runs share a process).
"""
from __future__ import annotations

import contextlib
import os

import torch

PHASES = {  # the phase -> the setting whose size is that phase's memory, in the words of a study file
    "rollout": "train.prompts_per_step or options.group_size (each process decodes its share of "
               "prompts_per_step x group_size rows at once), or options.max_new_tokens",
    "scoring": "options.micro_batch (sequences per forward; 0 scores the whole batch at once)",
    "backward": "options.micro_batch (sequences per forward and backward; 0 is the whole batch)",
    "optimizer": "the trained parameters: options.trainable: lora, or sharding: fsdp over more processes "
                 "(AdamW keeps 16 bytes per trained parameter)",
    "evaluation": "evaluation.decode_batch (rows per generate call; unset, each process decodes its share of "
                  "prompts x samples at once), or more processes",
    "training step": "train.prompts_per_step (the method marks no finer phase)",
}


class MemoryFault(RuntimeError):
    """A run ran out of device memory; the message names where, the phase and the setting to lower."""


@contextlib.contextmanager
def phase(name: str):
    """Name an out-of-memory error raised inside with phase ``name``, unless an inner ``phase`` named it."""
    try:
        yield
    except torch.OutOfMemoryError as error:
        if not hasattr(error, "arena_phase"):
            error.arena_phase = name
        raise


@contextlib.contextmanager
def out_of_memory(where: str, resume: str, unmarked: str = "training step"):
    """Turn an out-of-memory error inside into one ``MemoryFault`` naming ``where`` (the step or evaluation mark),
    its phase (``phase``; else ``unmarked``), the setting to lower and ``resume``, where a rerun goes on."""
    try:
        yield
    except torch.OutOfMemoryError as error:
        name = getattr(error, "arena_phase", unmarked)
        detail = str(error).strip().split("\n")[0].split(". ")[0]
        raise MemoryFault(f"out of device memory at {where}, in the {name} phase ({detail}): lower {PHASES[name]} "
                          f"(a new run, under another config hash), or give the run more memory (fewer --jobs per "
                          f"device, a larger device) and rerun the same command, which resumes it from "
                          f"{resume}") from None


def deterministic_kernels(on: bool) -> None:
    """torch's deterministic algorithms on (or off) for this process: cuDNN's deterministic convolutions without
    autotuning, cuBLAS on a fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, read when the process first uses
    cuBLAS: set it in the environment of a process that computed on the GPU before), and an error naming any
    operation that has no deterministic kernel."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = False
