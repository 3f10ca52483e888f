"""ES perturbation cost on the tiny model: perturb+restore seconds per member as a share of the
member's evaluation (generation + reward), and the memory ES keeps per trainable parameter (its fp32
masters), for ``full`` and ``lowrank`` noise, fp32 and bf16 weights.

    python -m benchmarks.es_perturb [--model tiny|random] [--steps 2] [--population 8] [--prompts 16]

Run from the repository root. ``tiny`` is the pretrained tiny model (trained and cached on first use);
``random`` is the same network untrained, which skips that.
"""
from __future__ import annotations

import argparse

import torch

from arena.model import load_policy
from arena.model.tiny import build_policy
from methods.base import make_method
from rewards import get_task


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "random"], default="tiny")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
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
