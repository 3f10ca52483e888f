"""The ``arena`` command line. User mistakes print one clear line and exit 2, without a traceback."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


class UserError(Exception):
    """A mistake in the command line or its inputs; printed without a traceback."""


def cmd_pretrain(args) -> None:
    import dataclasses

    from arena.model.tiny import TinyConfig, cache_root, matches_within_noise, pretrain, shipped_report

    config = dataclasses.replace(TinyConfig(), steps=args.steps) if args.steps else TinyConfig()
    path = args.out or cache_root() / f"tiny-{config.digest()}"
    report = pretrain(config, path, progress=not args.quiet)
    print(f"tiny model built in {report['seconds']:.0f} s (config {report['digest']}): {path}")
    shipped = shipped_report()
    same_config = shipped.get("digest") == report["digest"]
    print("held-out exact match per difficulty level (operand digits), rebuilt" + (" | shipped" if same_config else ""))
    for level in report["heldout_greedy"]:
        row = f"  level {level}: greedy {report['heldout_greedy'][level]:6.1%}  sampled {report['heldout_sampled'][level]:6.1%}"
        if same_config:
            row += f"  | greedy {shipped['heldout_greedy'][level]:6.1%}  sampled {shipped['heldout_sampled'][level]:6.1%}"
        print(row)
    if not same_config:
        print(f"(the shipped checkpoint has config {shipped.get('digest')}: a different recipe, not compared)")
        return
    differing = matches_within_noise(report, shipped)
    print("the rebuild matches the shipped checkpoint within noise (3 binomial standard errors)" if not differing
          else "the rebuild differs from the shipped checkpoint beyond noise: " + "; ".join(differing))


def cmd_sample(args) -> None:
    from arena.model import load_policy
    from arena.model.sampler import SamplerConfig, generate
    from rewards import chat_prompt

    policy = load_policy(args.model)
    config = SamplerConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                           threshold=args.threshold, order=args.order)
    text = args.prompt if args.raw else chat_prompt(args.prompt, policy.tokenizer)
    prompt = policy.encode(text)
    if not prompt:
        raise UserError("--prompt: the prompt is empty after tokenization")
    out = generate(policy, [prompt] * args.n, config, seed=args.seed)
    for i, text in enumerate(out.texts):
        print(f"[{i}] {args.prompt}{text}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arena", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    pretrain = commands.add_parser("pretrain", help="rebuild the embedded tiny model and compare it with the shipped one")
    pretrain.add_argument("--steps", type=int, default=None, help="training steps (default: the tiny config's)")
    pretrain.add_argument("--out", type=Path, default=None, help="output directory (default: the cache, $ARENA_CACHE)")
    pretrain.add_argument("--quiet", action="store_true", help="no progress bar")
    pretrain.set_defaults(run=cmd_pretrain)

    sample = commands.add_parser("sample", help="print completions of a prompt")
    sample.add_argument("--model", default="tiny", help="'tiny', a checkpoint directory, or a hub id")
    sample.add_argument("--prompt", required=True)
    sample.add_argument("--n", type=int, default=1)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--temperature", type=float, default=0.0)
    sample.add_argument("--top-p", type=float, default=1.0)
    sample.add_argument("--threshold", type=float, default=1.0, help="confidence threshold (1 = one token a step)")
    sample.add_argument("--order", choices=("confidence", "random"), default="confidence")
    sample.add_argument("--max-new-tokens", type=int, default=32)
    sample.add_argument("--raw", action="store_true", help="do not wrap the prompt in the tokenizer's chat template")
    sample.set_defaults(run=cmd_sample)

    from arena.estimators import add_command as add_estimators
    add_estimators(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from arena.model.policy import CheckpointError

    try:
        args.run(args)
    except (UserError, CheckpointError) as error:
        print(f"arena {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"arena {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
