"""The ``arena`` command line. User mistakes print one clear line and exit 2, without a traceback."""
from __future__ import annotations

import argparse
import sys


class UserError(Exception):
    """A mistake in the command line or its inputs; printed without a traceback."""


def cmd_pretrain(args) -> None:
    import json
    import shutil

    from arena.tiny import TinyConfig, cache_root, pretrain

    config = TinyConfig(steps=args.steps) if args.steps else TinyConfig()
    path = cache_root() / f"tiny-{config.digest()}"
    if (path / "pretrain.json").exists() and not args.force:
        report = json.loads((path / "pretrain.json").read_text())
        print(f"tiny model already built: {path}")
    else:
        if path.exists():
            shutil.rmtree(path)
        report = pretrain(config, path, progress=not args.quiet)
        print(f"tiny model built in {report['seconds']:.0f} s: {path}")
    print("held-out exact match by difficulty (operand digits):")
    for level, accuracy in report["heldout_accuracy"].items():
        print(f"  {level} digit{'s' if str(level) != '1' else ' '}  {accuracy:6.1%}")


def cmd_sample(args) -> None:
    from arena.policy import load_policy
    from arena.sampler import SamplerConfig, generate
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

    pretrain = commands.add_parser("pretrain", help="build (or show) the embedded tiny model")
    pretrain.add_argument("--steps", type=int, default=None, help="training steps (default: the tiny config's)")
    pretrain.add_argument("--force", action="store_true", help="retrain even if cached")
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

    from arena.estimator_report import add_command as add_estimators
    add_estimators(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from arena.policy import CheckpointError

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
