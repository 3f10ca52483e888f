"""Fully sharded data parallel training (FSDP2: ``torch.distributed.fsdp.fully_shard``) and fp32 master weights.

FSDP (Zhao et al. 2023, "PyTorch FSDP", arXiv 2304.11277) keeps 1/N of every parameter, gradient
and optimizer moment on each of N ranks and all-gathers a layer's parameters just before its
forward. Full fine-tuning of Fast-dLLM v2 7B needs it: AdamW with fp32 master weights holds
4 (master) + 4 (gradient) + 8 (two moments) = 16 bytes per parameter, 122 GB for 7.6e9
parameters, before activations and the frozen reference; sharded over 8 GPUs that is 15 GB each.
``docs/distributed.md`` has the launch recipe.

How the model is cut: one unit per decoder layer, and two roots, the decoder (embeddings, final
norm) and the output head, because the policy calls them separately (logits only at the positions
it needs). Tied embeddings would put one tensor in both roots, which FSDP refuses; Fast-dLLM v2 7B
unties them (the 1.5B may tie them, as Qwen2.5-1.5B does; it fits on one GPU without sharding).

Precision: sharded parameters are fp32 master weights; each forward all-gathers them in the
checkpoint's dtype (bf16 on GPU). Gradients are reduced in fp32 and summed, not averaged
(divide factor 1): the GRPO loss is already normalised by the global unit count.

Generation: rows stop at different blocks, so ranks run different numbers of forwards; inside
``gathered`` the parameters are all-gathered once and kept, so those forwards issue no collectives.

Checkpoints: under FSDP a method's state holds this rank's shards (DTensors). Save it with
``torch.distributed.checkpoint`` (every rank writes its own shards, none holds the whole 91 GB of
7B masters and moments); it loads onto any world size.

Without FSDP, ``MasterWeights`` gives a low-precision model the same fp32 master: a bf16 weight
of size 0.02 has a spacing of 1.2e-4, and an AdamW step of lr 1e-6 would round to nothing.
"""
from __future__ import annotations

import contextlib
import os

import torch


def shard(model: torch.nn.Module) -> None:
    """Shard ``model`` (a ``Qwen2ForCausalLM``) in place over the default process group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from methods.collectives import world

    if not torch.distributed.is_initialized():
        raise ValueError("sharding='fsdp' needs torch.distributed: launch with accelerate launch or torchrun")
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if head.weight is decoder.get_input_embeddings().weight:
        raise ValueError("sharding='fsdp' needs untied input and output embeddings (tie_word_embeddings: false)")
    compute_dtype = next(model.parameters()).dtype
    if any(p.requires_grad for p in model.parameters()):
        model.float()  # the shards are the fp32 master weights
    options = {"mesh": init_device_mesh(next(model.parameters()).device.type, (world()[1],)),
               "mp_policy": MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32),
               "reshard_after_forward": True}
    for unit in (*decoder.layers, decoder, head):
        fully_shard(unit, **options)
        unit.set_gradient_divide_factor(1.0)  # a plain sum (gloo has no pre-multiplied sum)
        unit.set_force_sum_reduction_for_comms(True)


def check_launcher(sharding: str) -> None:
    """Refuse accelerate's own FSDP launch settings: arena never applies them (no ``prepare``)."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and sharding != "fsdp":
        raise ValueError("accelerate was launched with distributed_type FSDP, which arena does not apply: launch with "
                         "configs/accelerate/multi_gpu.yaml and set the method option sharding: fsdp "
                         "(docs/distributed.md)")


def units(model: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def is_sharded(model: torch.nn.Module) -> bool:
    return bool(units(model))


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded parameter (a DTensor); an unsharded tensor is its own."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


@contextlib.contextmanager
def gathered(model: torch.nn.Module):
    """All-gather every unit once and keep it gathered: forwards inside issue no collectives."""
    if not is_sharded(model):
        yield
        return
    fsdp_units = units(model)
    for unit in fsdp_units:
        unit.set_reshard_after_forward(False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in fsdp_units:
            unit.reshard()
            unit.set_reshard_after_forward(True)


class MasterWeights:
    """fp32 copies of low-precision trainable parameters; fp32 parameters are their own master.

    The optimizer steps the masters. ``accumulate`` moves each backward's gradients into the
    masters in fp32 (so micro-batches do not accumulate in bf16); ``publish`` rounds the masters
    back into the model.
    """

    def __init__(self, params: list[torch.nn.Parameter]):
        self.params = params
        self.masters = [p if p.dtype == torch.float32 else p.detach().float().requires_grad_() for p in params]

    def accumulate(self) -> None:
        for param, master in zip(self.params, self.masters):
            if master is not param and param.grad is not None:
                master.grad = param.grad.float() if master.grad is None else master.grad.add_(param.grad)
                param.grad = None

    def publish(self) -> None:
        with torch.no_grad():
            for param, master in zip(self.params, self.masters):
                if master is not param:
                    param.copy_(master)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's state; for a sharded model, this rank's shards keyed by parameter name.

    torch fills a fresh optimizer's state (a checkpoint before the first step) by stepping it at learning
    rate 0, which AdamW counts: its bias correction would take the first real step for the second and
    shrink it (by 0.74 for the default betas). Counted back to 0, the zero moments are a fresh AdamW's.
    """
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    fresh = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer)
    if fresh:
        for moments in (*optimizer.state.values(), *state["state"].values()):
            if "step" in moments:
                moments["step"].zero_()
    return state


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    if not is_sharded(model):
        return optimizer.load_state_dict(state)
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state)
