"""Does an ES population see a signal at the base model? For each noise scale σ (absolute, or relative to
each tensor's RMS) and fitness size (prompts and samples per member), the share of antithetic pairs whose
two members tie exactly (they cancel: the pair moves nothing), the fitness SD over members, σ over the
perturbed tensors' RMS, and the seconds per step. α = 0: the policy never moves, so every step is a
fresh look at the base model (its prompts and noise keyed by the step, as in a run).

    python -m benchmarks.es_signal [--steps 4] [--sigmas absolute:0.003,relative:0.01 ...] [--prompts 8,32]

Run from the repository root, single-threaded (OMP_NUM_THREADS=1). The other ES options are those of the
es arm of studies/es_vs_blockgrpo.yaml (population 16, temperature 1, 8 new tokens); the task and the
prompt draws are that study's (noisy_arithmetic levels 1-2, drawn by (seed 0, step) as the runner does).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from arena.model import load_policy
from arena.rng import RunKey, seed_of
from arena.study import load_study
from methods.base import make_method
from rewards import load_task

STUDY = "studies/es_vs_blockgrpo.yaml"
GRID = ("absolute:0.003,absolute:0.01,absolute:0.03668,relative:0.001,relative:0.01,relative:0.1,"
        "relative:0.3,relative:1.0")


def measure(study, task, scale: str, sigma: float, prompts: int, samples: int, steps: int) -> dict:
    policy = load_policy(study.model)
    options = {**study.arms["es"].options, "alpha": 0.0, "sigma": sigma, "sigma_scale": scale,
               "prompts_per_member": prompts, "samples_per_member": samples}
    method = make_method("es", policy, options, seed=0)
    found = {"tied": [], "fitness_std": [], "median": [], "min": [], "max": [], "seconds": []}
    for step in range(steps):
        examples = task.examples("train", n=max(prompts, study.train.prompts_per_step),
                                 seed=seed_of(0, RunKey.TRAIN_PROMPTS, step))
        encoded = [policy.encode(task.prompt(e, policy.tokenizer)) for e in examples]
        began = time.perf_counter()
        stats = method.step(encoded, lambda i, text: float(task.reward(text, examples[i])), step).stats
        found["seconds"].append(time.perf_counter() - began)
        for key, name in (("tied", "tied_pairs"), ("fitness_std", "fitness_std"), ("median", "sigma_rms_median"),
                          ("min", "sigma_rms_min"), ("max", "sigma_rms_max")):
            found[key].append(stats[name])
    return {key: statistics.fmean(values) for key, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sigmas", default=GRID, help="comma-separated scale:sigma, scale absolute or relative")
    parser.add_argument("--prompts", default="8", help="comma-separated prompts per member")
    parser.add_argument("--samples", type=int, default=1, help="samples per prompt and member")
    args = parser.parse_args()
    torch.set_num_threads(1)
    study = load_study(STUDY)
    task = load_task(study.task.name, study.task.levels)
    population = study.arms["es"].options["population"]
    print(f"{study.model} model, {study.task.name} levels {list(study.task.levels)}, population {population}, "
          f"{args.samples} sample(s) per prompt, mean over {args.steps} steps ({args.steps * population // 2} pairs "
          "per row); sigma/RMS: median [min, max] over the perturbed tensors")
    print(f"{'scale':9} {'sigma':>8} {'prompts':>7} {'tied pairs':>10} {'fitness SD':>10} "
          f"{'sigma/RMS median [min, max]':>30} {'s/step':>7}")
    for prompts in (int(p) for p in args.prompts.split(",")):
        for entry in args.sigmas.split(","):
            scale, sigma = entry.split(":")
            r = measure(study, task, scale, float(sigma), prompts, args.samples, args.steps)
            spread = f"{r['median']:.3g} [{r['min']:.3g}, {r['max']:.3g}]"
            print(f"{scale:9} {float(sigma):>8.4g} {prompts:>7} {r['tied']:>10.1%} {r['fitness_std']:>10.4f} "
                  f"{spread:>30} {r['seconds']:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
