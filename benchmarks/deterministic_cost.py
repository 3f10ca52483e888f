"""The cost of deterministic kernels (``train.deterministic``): GRPO steps with torch's deterministic algorithms off
and on, alternated, on the GPU if there is one, else the CPU.

    python -m benchmarks.deterministic_cost [--model tiny|random] [--steps 6] [--prompts 4] [--group 4]

Run from the repository root (see ``benchmarks.sampler_and_scoring`` for ``--model``). Each repeat times one
block_grpo step (ELBO, 2 draws, 32 new tokens) without, then with, deterministic kernels, on one policy whose
weights the steps move; the table shows the medians and their ratio (on / off). On the CPU the kernels already are
deterministic: only the fill of uninitialised memory costs, and the ratio shows that and the timing noise.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from arena.memory import deterministic_kernels
from benchmarks.sampler_and_scoring import load
from methods.base import make_method

PROMPTS = ["12+7=", "3+4=", "45+67=", "9+9=", "71+8=", "5+55="]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "random"], default="tiny")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per mode, after one warm-up each")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    policy = load(args.model)
    policy.model.to(device)
    method = make_method("block_grpo", policy, {"group_size": args.group, "max_new_tokens": 32, "estimator": "elbo",
                                                "draws": 2, "lr": 1e-6}, seed=0)
    prompts = [policy.encode(PROMPTS[i % len(PROMPTS)]) for i in range(args.prompts)]
    reward = lambda i, text: float(sum(c.isdigit() for c in text)) / max(1, len(text))  # noqa: E731
    seconds: dict[bool, list[float]] = {False: [], True: []}
    try:
        for step in range(args.steps + 1):
            for on in (False, True):
                deterministic_kernels(on)
                if device == "cuda":
                    torch.cuda.synchronize()
                began = time.perf_counter()
                method.step(prompts, reward, 2 * step + on)
                if device == "cuda":
                    torch.cuda.synchronize()
                if step:  # the first of each is a warm-up
                    seconds[on].append(time.perf_counter() - began)
    finally:
        deterministic_kernels(False)
    off, on = (statistics.median(seconds[mode]) for mode in (False, True))
    print(f"block_grpo step on {device} ({torch.get_num_threads()} threads), {args.prompts} prompts x "
          f"{args.group}, model {args.model}, median of {args.steps}")
    print(f"{'deterministic':>13} {'step s':>8} {'ratio':>6}")
    print(f"{'off':>13} {off:>8.3f} {1.0:>6.2f}")
    print(f"{'on':>13} {on:>8.3f} {on / off:>6.2f}")


if __name__ == "__main__":
    main()
