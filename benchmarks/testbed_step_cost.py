"""One training step of each GRPO-family method on the embedded testbeds' geometries, timed in one run.

    python -m benchmarks.testbed_step_cost [--models tiny-multiblock,tiny-inblock] [--steps 1]

Run from the repository root, single-threaded (``OMP_NUM_THREADS=1``). For each embedded recipe, a policy with
its network and block geometry at its keyed random initialisation (the weights do not change the cost: the
sampler decodes whole blocks up to the study's ``max_new_tokens`` either way, the scorer packs the same views),
16 prompts of its task, and one step of block_grpo (ELBO, 2 draws), grpo and diffu_grpo at the multi-block
study's settings (group 8, μ = 4): the rollout of 128 completions, 4 inner iterations, their backward passes.
Ratios are against the first model, measured in the same run, so a machine's load moves both alike (both
would still slow if the load changed during the run: interleave with ``--steps`` > 1 and compare). The last
column is the process's peak resident memory so far (Linux ``ru_maxrss``), which only grows.
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from arena.model.tiny import build_policy, embedded
from methods.base import make_method
from rewards import get_task

NEW_TOKENS = {"tiny-multiblock": 33, "tiny-inblock": 36}  # the studies' max_new_tokens
METHODS = {"block_grpo": {"estimator": "elbo", "draws": 2}, "grpo": {}, "diffu_grpo": {}}


def step_seconds(model: str, method: str, steps: int) -> float:
    """Mean seconds of ``steps`` steps of ``method`` on a fresh random-init policy of ``model``'s recipe."""
    config = embedded(model)[0]
    policy, task = build_policy(config), get_task(config.task)
    examples = task.examples("train", n=16, seed=0)
    prompts = [policy.encode(task.prompt(e)) for e in examples]
    options = {"lr": 1e-4, "inner_iterations": 4, "group_size": 8, "max_new_tokens": NEW_TOKENS[model],
               **METHODS[method]}
    runner = make_method(method, policy, options, seed=0)
    began = time.perf_counter()
    for step in range(steps):
        runner.step(prompts, lambda i, text: task.reward(text, examples[i]), step)
    return (time.perf_counter() - began) / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny-multiblock,tiny-inblock")
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    models = args.models.split(",")
    seconds = {}
    print(f"{'model':16} {'block/sub':>9} {'method':12} {'s/step':>8} {'vs ' + models[0]:>20} {'peak RSS GiB':>13}")
    for method in METHODS:
        for model in models:
            seconds[model, method] = step_seconds(model, method, args.steps)
            config = embedded(model)[0]
            ratio = seconds[model, method] / seconds[models[0], method]
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            print(f"{model:16} {f'{config.block_size}/{config.sub_block}':>9} {method:12} "
                  f"{seconds[model, method]:>8.1f} {ratio:>19.2f}x {peak:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
