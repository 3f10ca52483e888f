"""Train a GRPO-family method on several processes: the launch recipe of docs/distributed.md.

    accelerate launch --config_file configs/accelerate/multi_gpu.yaml examples/distributed_grpo.py \\
        --model Efficient-Large-Model/Fast_dLLM_v2_7B --task gsm8k --sharding fsdp --lr 1e-6

Every rank builds the same prompt batch; the method takes its share (prompts rank::world) and
reduces gradients and statistics itself. Rank 0 prints one JSON line per step. A study's run, with
evaluation, MLflow and checkpoints, goes through ``torchrun -m arena run`` (docs/scaling.md).
"""
from __future__ import annotations

import argparse
import json
import sys

from accelerate import PartialState

from arena.model import load_policy
from arena.rng import seed_of
from arena.processes import leave_process_group
from methods import make_method
from methods.base import world
from rewards import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, a Fast-dLLM v2 directory, or a hub id")
    parser.add_argument("--method", default="block_grpo", choices=["grpo", "diffu_grpo", "block_grpo"])
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--sharding", default="none", choices=["none", "fsdp"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step, all ranks together")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    state = PartialState()  # joins the process group that accelerate launch (or torchrun) set up
    policy = load_policy(args.model, device=str(state.device))
    task = get_task(args.task)
    options = {"sharding": args.sharding, "lr": args.lr, "group_size": args.group_size,
               "max_new_tokens": args.max_new_tokens}
    method = make_method(args.method, policy, options, seed=args.seed)
    for step in range(args.steps):
        examples = task.examples("train", n=args.prompts, seed=seed_of(args.seed, step))
        prompts = [policy.encode(task.prompt(e, policy.tokenizer)) for e in examples]
        result = method.step(prompts, lambda i, text: task.reward(text, examples[i]), step=step)
        if world()[0] == 0:  # the statistics include the consumption (samples, tokens, forward_tokens)
            print(json.dumps({"step": step, **result.stats}), flush=True)


if __name__ == "__main__":
    main()
    sys.exit(leave_process_group(0))  # ranks leave together; see there why a launched process ends by os._exit
