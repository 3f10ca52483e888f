"""ES perturbation cost on the tiny model: perturb+restore seconds per member as a share of the
member's evaluation (generation + reward), and the memory ES keeps per trainable parameter (its fp32
masters), for ``full`` and ``lowrank`` noise, fp32 and bf16 weights.

    python -m benchmarks.es_perturb [--model tiny|random] [--steps 2] [--population 8] [--prompts 16]
    python -m benchmarks.es_perturb --layer-7b [--members 3]

Run from the repository root. ``tiny`` is the pretrained tiny model (trained and cached on first use);
``random`` is the same network untrained, which skips that.

``--layer-7b`` times perturb+restore alone (``ES.ask``, entered and left) on one decoder layer at the 7B width
(hidden 3584, intermediate 18944, 28 heads, 4 KV heads: 233 M parameters, about 4 GiB at its peak in fp32),
against the previous way of perturbing measured in the same run: noise drawn on the CPU and copied to the
parameter's device (``.to(param.device)``), which ``methods.es_noise`` replaced by drawing on that device. On
the CPU both draw the same numbers in the same place, so the ratio says what the change costs there (nothing,
within timing noise); on a GPU the baseline's draw and copy are what the change removes.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time

import torch

from arena.model import load_policy
from arena.model.tiny import TinyConfig, build_policy
from methods.base import make_method
from methods.es import pair
from rewards import get_task

LAYER_7B = TinyConfig(layers=1, hidden=3584, heads=28, kv_heads=4, intermediate=18944)


def measure(args, noise: str, dtype: torch.dtype) -> dict:
    policy = load_policy("tiny") if args.model == "tiny" else build_policy()
    policy.model.to(dtype)
    options = {"population": args.population, "prompts_per_member": args.prompts,
               "max_new_tokens": args.max_new_tokens, "noise": noise}
    method = make_method("es", policy, options, seed=0)
    task = get_task("arithmetic")
    seconds = {"perturb": 0.0, "member": 0.0}
    for step in range(args.steps):
        examples = task.examples("train", n=args.prompts, seed=step)
        prompts = [policy.encode(task.prompt(e)) for e in examples]
        stats = method.step(prompts, lambda i, text: task.reward(text, examples[i]), step).stats
        seconds["perturb"] += stats["perturb_seconds"] / args.steps
        seconds["member"] += stats["member_seconds"] / args.steps
    trained = sum(p.numel() for _, p in method.params)
    kept = sum(t.numel() * t.element_size() for t in method.master.values())
    return {"noise": noise, "dtype": str(dtype).removeprefix("torch."), "params": trained, **seconds,
            "share": seconds["perturb"] / seconds["member"], "bytes": kept / trained}


@contextlib.contextmanager
@torch.no_grad()
def host_drawn(method, step: int, member: int):
    """The previous perturbation, as the baseline: dense noise drawn on the CPU, then moved to the parameter's
    device; low-rank factors likewise (the forward hook itself is the same as ``ES.ask``'s, and not installed)."""
    j, sign = pair(member, method.config.antithetic)
    try:
        for name, param in method.params:
            scaled = method.config.sigma * method.scales[name]
            if name in method.hooked:
                a, b = method.noise.factors(step, j, name, param.shape)
                a, b = (a * (sign * scaled / method.noise.rank ** 0.5)).to(param), b.to(param)
            else:
                noise = method.noise.dense(step, j, name, param.shape).to(param.device)
                param.copy_(method.master[name] + sign * scaled * noise)
        yield
    finally:
        for name, param in method.params:
            if name not in method.hooked:
                param.copy_(method.master[name])


def time_members(perturb, members: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds (all threads: the work, whatever else loads the machine) of
    perturb+restore over ``members`` members (step 0)."""
    wall, cpu = [], []
    for member in range(members):
        began, began_cpu = time.perf_counter(), time.process_time()
        with perturb(0, member):
            pass
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return statistics.median(wall), statistics.median(cpu)


def layer_7b(members: int) -> None:
    policy = build_policy(LAYER_7B)
    layer = [name for name, _ in policy.model.named_parameters() if ".layers.0." in name]
    print(f"one layer at the 7B width: {len(layer)} tensors, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, median of {members} members")
    print("seconds per member: wall-clock, and CPU (all threads); ratio = on-device / host-drawn")
    print(f"{'noise':8} {'dtype':9} {'params':>12} {'host-drawn wall':>15} {'on-device wall':>14} {'ratio':>6} "
          f"{'host-drawn cpu':>14} {'on-device cpu':>13} {'ratio':>6}")
    for dtype in (torch.float32, torch.bfloat16):
        policy.model.to(dtype)
        for noise in ("full", "lowrank"):
            method = make_method("es", policy, {"noise": noise, "trainable": "subset",
                                                "trainable_names": [r"layers\.0\."]}, seed=0)
            count = sum(p.numel() for _, p in method.params)
            (wall_0, cpu_0), (wall_1, cpu_1) = (time_members(perturb, members) for perturb in
                                                (functools.partial(host_drawn, method), method.ask))
            print(f"{noise:8} {str(dtype).removeprefix('torch.'):9} {count:>12,} {wall_0:>15.3f} {wall_1:>14.3f} "
                  f"{wall_1 / wall_0:>6.2f} {cpu_0:>14.3f} {cpu_1:>13.3f} {cpu_1 / cpu_0:>6.2f}")
            method = None  # its masters freed before the next one's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "random"], default="tiny")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--layer-7b", action="store_true", help="perturb+restore alone on one 7B-width layer")
    parser.add_argument("--members", type=int, default=3)
    args = parser.parse_args()
    if args.layer_7b:
        return layer_7b(args.members)
    print(f"model {args.model}, population {args.population}, {args.prompts} prompts x {args.max_new_tokens} "
          f"new tokens per member, mean over {args.steps} steps")
    print(f"{'noise':8} {'dtype':9} {'trainable':>10} {'perturb+restore s':>18} {'evaluation s':>13} "
          f"{'share':>7} {'bytes/param':>12}")
    for noise in ("full", "lowrank"):
        for dtype in (torch.float32, torch.bfloat16):
            r = measure(args, noise, dtype)
            print(f"{r['noise']:8} {r['dtype']:9} {r['params']:>10,} {r['perturb']:>18.5f} {r['member']:>13.4f} "
                  f"{r['share']:>7.2%} {r['bytes']:>12.2f}")


if __name__ == "__main__":
    main()
