"""``arena plan``: before a cluster is booked, what each arm of a study needs per GPU and how long the study takes.

Memory, per GPU and by part, at the precision the run uses (``weight_bytes``: 2 for bf16 on a GPU, 4 for fp32 on
the CPU), from the network's widths (``Shape``) and the arm's method config, for what arena's code holds:
- weights: the model's parameters (under FSDP over k GPUs, 1/k of them as fp32 masters, plus one decoder
  layer gathered in the compute dtype);
- trainable: LoRA's adapters, fp32 (peft keeps adapters of a bf16 model in fp32, so they are their own master);
- gradients: the trained parameters' (full fine-tuning: the bf16 gradient a backward writes and the fp32 one
  ``methods.fsdp.MasterWeights`` accumulates);
- optimizer: AdamW's two fp32 moments; ES keeps its previous update (fp32, ``update_cosine``);
- masters: fp32 copies of low-precision trained parameters (GRPO full fine-tuning; ES copies every trained one);
- reference: the frozen copy GRPO keeps for β > 0 without LoRA (LoRA disables the adapter instead);
- activations: one micro-batch of the scoring layout kept for the backward pass (``ACTIVATION_PER_TOKEN``),
  its logits at the scored positions, and the dense attention mask;
- rollout: the block KV cache of a whole rollout batch (``generate`` decodes every row at once) and the largest
  transient of a forward (the prompt's prefill, or a block's 32 fp32 logits per row);
- evaluation: the same for one evaluation ``generate`` call (``evaluation.decode_batch`` rows, else every prompt x
  sample at once).
The phases peak apart: training state + activations, + rollout, + evaluation, + the fp32 temporary the runner's
weight_drift makes of the largest tensor, + a checkpoint's clone of the fp32 masters; the largest decides. Host
memory per run (``host``): the runner's start copy, weight_drift's transient, a checkpoint's write, the data.

Time, from the FLOP accounting of ``arena.budget`` (``token_flops``: 2·P per forward token, 2·P + 2·P_t per
backward one): a step's forward and backward tokens at the profile's lengths, divided by a stated MFU of the
GPU's dense bf16 peak; a decoding forward takes at least the time to read the weights and KV cache at a stated
share of the memory bandwidth (``arena.plan.assumptions``: each number beside its source).
Attention's own FLOPs are left out, as in the budget's accounting.

A planning approximation, checked against measured peaks by ``benchmarks/rehearsal.py`` (docs/performance.md).
Modules by job: ``shape`` (widths, token counts), ``footprint`` (memory), ``cost`` (time), ``study`` (a study's
plan and its table), ``assumptions`` (the numbers taken from elsewhere).
"""
from arena.plan.assumptions import BANDWIDTH_USE, DATASET_BYTES, GIB, GPUS, MFU, PROMPT_TOKENS, USABLE
from arena.plan.cost import step_cost
from arena.plan.footprint import host, memory
from arena.plan.shape import Lengths, Shape, estimator_of, lengths
from arena.plan.study import format_plan, plan_study

__all__ = ["BANDWIDTH_USE", "DATASET_BYTES", "GIB", "GPUS", "MFU", "PROMPT_TOKENS", "USABLE", "Lengths", "Shape",
           "estimator_of", "format_plan", "host", "lengths", "memory", "plan_study", "step_cost"]
