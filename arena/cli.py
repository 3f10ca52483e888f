"""The ``arena`` command line: the parser of every command and ``main``; what a command does once its
arguments are parsed is in ``arena.commands``.

Building the parser imports nothing heavy (no torch, transformers, numpy or ``methods``), so ``--help``
and argument errors answer at once; a command imports what it needs when it runs. Out-of-range
arguments are rejected by the ``type=`` validators below, so argparse names the argument and exits 2;
mistakes found later raise ``UserError``: one line, exit 2, no traceback.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from arena import __version__
from arena.budget import UNITS
from arena.commands import (UserError, cmd_estimators, cmd_export, cmd_import, cmd_plan, cmd_pretrain, cmd_report,
                            cmd_run, cmd_sample, cmd_tune, cmd_ui, cmd_validate)

DESCRIPTION = ("arena: compare RL optimizers of block-diffusion language models on the same rewards, prompts "
               "and compute budget.")



# ---------------------------------------------------------------------------------------------
# argument types: argparse prints "argument --NAME: expected ..., got ..." and exits 2


def _checked(convert, accept, expected: str):
    """An argparse ``type=``: ``convert`` the text, keep the value if ``accept`` holds, else say what was expected."""
    def parse(text: str):
        try:
            value = convert(text)
            if accept(value):
                return value
        except ValueError:
            pass
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")

    return parse


positive_int = _checked(int, lambda v: v >= 1, "a positive integer")
non_negative_int = _checked(int, lambda v: v >= 0, "a non-negative integer")
non_negative_float = _checked(float, lambda v: 0 <= v < math.inf, "a non-negative number")  # nan fails too
probability = _checked(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
positive_float = _checked(float, lambda v: 0 < v < math.inf, "a positive number")
share = _checked(float, lambda v: 0 < v < 1, "a number in (0, 1)")
evaluation_size = _checked(lambda text: tuple(int(part) for part in text.lower().split("x")),
                           lambda v: len(v) == 2 and min(v) >= 1, "PROMPTSxSAMPLES, two positive integers, e.g. 1024x16")


def reach_target(text: str) -> tuple[str, str, float]:
    from arena.report.reach import parse_target

    try:
        return parse_target(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


versus_target = _checked(lambda text: tuple(text.rsplit(":", 1)), lambda v: len(v) == 2 and all(v),
                         "STUDY.yaml:ARM, e.g. studies/confirm/multiblock.yaml:block_grpo")


def table_columns(text: str) -> tuple[str, ...]:
    from arena.report.tables import column_names

    try:
        return column_names(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def task_name(text: str) -> str:
    """A registered task or 'package.module:Name' (built when the command runs)."""
    from rewards import TASKS

    if ":" in text or text in TASKS.factories:
        return text
    raise argparse.ArgumentTypeError(f"expected a task ({', '.join(sorted(TASKS.factories))}) or "
                                     f"package.module:Name, got {text!r}")


positive_int_list = _checked(lambda text: [int(part) for part in text.split(",")], lambda v: all(k >= 1 for k in v),
                             "positive integers separated by commas")


def _only(text: str) -> dict[str, str]:
    """``arm=NAME,seed=N`` -> {"arm": NAME, "seed": N}."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    if not pairs or any(len(p) != 2 or p[0] not in ("arm", "seed") for p in pairs):
        raise argparse.ArgumentTypeError(f"expected arm=NAME,seed=N (either may be left out), got {text!r}")
    only = dict(pairs)
    if "seed" in only and not only["seed"].isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer seed, got {only['seed']!r}")
    return only




# ---------------------------------------------------------------------------------------------
# the parser: one add_<command> function per command, each with a description and an example


def _command(commands, name: str, summary: str, description: str, example: str, run) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=summary, description=description, epilog=f"example:\n  {example}",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(run=run)
    return parser


def _add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny", metavar="tiny|tiny-multiblock|tiny-inblock|PATH|HUB_ID",
                        help="'tiny', 'tiny-multiblock' or 'tiny-inblock' (the embedded models), a Fast-dLLM v2 "
                             "checkpoint directory, "
                             "or a hub id (default: tiny)")


def add_pretrain(commands) -> None:
    parser = _command(
        commands, "pretrain", "rebuild an embedded tiny model and compare it with the shipped one",
        "Train an embedded tiny model from scratch on its pretraining task (tiny: noisy-teacher\n"
        "arithmetic; tiny-multiblock: eleven one-digit sums in blocks of 16; tiny-inblock: neighbour sums\n"
        "whose wrong mode swaps their digits, in blocks of 32), save it, and compare\n"
        "its held-out reward per difficulty level with the shipped checkpoint's (within 3 binomial\n"
        "standard errors, when both come from the same recipe).",
        "arena pretrain --out /tmp/tiny\n  arena pretrain --model tiny-multiblock --out /tmp/tiny-multiblock",
        cmd_pretrain)
    parser.add_argument("--model", default="tiny", metavar="tiny|tiny-multiblock|tiny-inblock",
                        help="which embedded model to rebuild (default: tiny)")
    parser.add_argument("--steps", type=positive_int, default=None, metavar="N",
                        help="training steps (default: the model's recipe)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="where to save the checkpoint (default: <model>-<recipe digest> under $ARENA_CACHE, "
                             "else ~/.cache/arena)")
    parser.add_argument("--quiet", action="store_true", help="hide the progress bar (default: shown)")


def add_sample(commands) -> None:
    parser = _command(
        commands, "sample", "print completions of a prompt",
        "Complete a prompt with the block-diffusion sampler and print the completions, numbered.\n"
        "The prompt goes through the checkpoint's chat template unless --raw; the same --seed\n"
        "gives the same completions.\n\n"
        "Against the reference Fast-dLLM v2 generate: at --temperature > 0 arena samples the first\n"
        "(autoregressive) token of every block at that temperature, where the reference always takes\n"
        "its argmax; and --top-p defaults to 1.0 (no truncation), the reference's top_p to 0.95. At\n"
        "temperature 0 both take the argmax everywhere.",
        "arena sample --prompt '12+7=' --n 4 --temperature 1 --seed 3", cmd_sample)
    _add_model(parser)
    parser.add_argument("--prompt", required=True, metavar="TEXT", help="the prompt to complete (required)")
    parser.add_argument("--n", type=positive_int, default=1, metavar="N",
                        help="completions to print (default: %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S",
                        help="keys the sampling randomness (default: %(default)s)")
    parser.add_argument("--temperature", type=non_negative_float, default=0.0, metavar="T",
                        help="sampling temperature, for every token including each block's first (the reference "
                             "takes that one's argmax); 0 takes the most likely token (default: %(default)s)")
    parser.add_argument("--top-p", type=probability, default=1.0, metavar="P",
                        help="nucleus sampling: keep the most likely tokens up to this probability mass, in (0, 1] "
                             "(default: %(default)s, no truncation; the reference's default is 0.95)")
    parser.add_argument("--threshold", type=probability, default=1.0, metavar="C",
                        help="confidence threshold in (0, 1]: each step unmasks every token drawn with a higher "
                             "probability, and at least one (default: %(default)s, one token a step)")
    parser.add_argument("--order", choices=("confidence", "random"), default="confidence",
                        help="which masked position to unmask next: the most confident, or uniformly at random "
                             "(default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=32, metavar="N",
                        help="new tokens; generation ends with the block that reaches them (default: %(default)s)")
    parser.add_argument("--sub-block-cache", action="store_true",
                        help="Fast-dLLM v2's sub-block cache (use_block_cache): after a full forward of the block, "
                             "forward only the current sub-block against the block's kept keys/values; fewer "
                             "positions per token, different logits (default: off, as in the reference)")
    parser.add_argument("--raw", action="store_true",
                        help="pass the prompt as is, without the chat template (default: templated)")


def add_estimators(commands) -> None:
    parser = _command(
        commands, "estimators", "bias, spread and cost of every likelihood estimator",
        "Sample completions of held-out prompts of --task (temperature 1, random unmasking\n"
        "order, the model's own sub-blocks), score each with every likelihood estimator and\n"
        "setting (ar, d1, block masked, Monte Carlo ELBO, Gauss-Legendre, EBPO, trajectory) under\n"
        "--repeats independent mask keys, and compare with the sampler's sub-block-chain ELBO:\n"
        "analytic for blocks of at most 8 tokens (with the exact log-likelihood), else Monte Carlo.\n"
        "Prints the table and writes estimators.json, estimators.md and estimators.png into --out.",
        "arena estimators --prompts 8 --draws 1,4 --nodes 2 --out /tmp/estimators", cmd_estimators)
    _add_model(parser)
    parser.add_argument("--prompts", type=positive_int, default=32, metavar="N",
                        help="held-out prompts, one completion each (default: %(default)s)")
    parser.add_argument("--task", type=task_name, default="arithmetic", metavar="NAME",
                        help="the task whose prompts the model completes, at its own levels; e.g. swap_sums for "
                             "tiny-inblock (default: %(default)s)")
    parser.add_argument("--draws", type=positive_int_list, default=[1, 2, 4, 8], metavar="K,K,...",
                        help="Monte Carlo ELBO draws per block; antithetic forms use the even ones (default: 1,2,4,8)")
    parser.add_argument("--nodes", type=positive_int_list, default=[1, 2, 3, 4], metavar="N,N,...",
                        help="Gauss-Legendre nodes per block (default: 1,2,3,4)")
    parser.add_argument("--repeats", type=positive_int, default=16, metavar="R",
                        help="independent mask keys per setting (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=16, metavar="N",
                        help="new tokens; generation ends with the block that reaches them (default: %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S",
                        help="keys the prompts, the samples and the masks (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("reports/estimators"), metavar="DIR",
                        help="folder for the report files (default: %(default)s)")


def _add_study(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("study", type=Path, nargs=None if required else "?", metavar="STUDY",
                        help="a study file (YAML), e.g. studies/es_vs_blockgrpo.yaml "
                             + ("(required)" if required else "(default: none; the tracking options decide)"))
    parser.add_argument("--profile", default=None, metavar="NAME",
                        help="run at another scale: fast-dllm-v2-1.5b or fast-dllm-v2-7b (default: the embedded tiny "
                             "model)")


def _add_tracking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", default=None, metavar="URI",
                        help="MLflow tracking store or server (default: $MLFLOW_TRACKING_URI, else the study's "
                             "tracking.uri, else sqlite:///mlflow.db in the working directory)")


def add_validate(commands) -> None:
    parser = _command(
        commands, "validate", "check a study file and report every mistake at once",
        "Read a study, check every section, every arm's method options (by the method's own\n"
        "validator) and the one-variable-at-a-time rule, and print every problem with its\n"
        "YAML path and line. Exit 2 if there is any.",
        "arena validate studies/es_vs_blockgrpo.yaml", cmd_validate)
    _add_study(parser)


def add_run(commands) -> None:
    parser = _command(
        commands, "run", "run a study: every arm x seed, evaluated at equal budget points, logged to MLflow",
        "Run every (arm, seed) of a study until it has used its budget, evaluating the tail\n"
        "reward at the same budget points for every arm, and log everything to MLflow. A rerun\n"
        "skips finished runs and resumes interrupted ones from their last evaluation point.\n"
        "Ends with the table 'arena report' writes, a row per arm and control: its seeds, tail\n"
        "gain (95% interval over seeds and evaluation draws), tail gain over sharpen (the\n"
        "sharpening control), hard gain (the hard prompts), verdict against the reference arm\n"
        "and train time (docs/reporting.md).",
        "arena run studies/es_vs_blockgrpo.yaml --jobs 2", cmd_run)
    _add_study(parser)
    parser.add_argument("--model", default=None, metavar="PATH|HUB_ID",
                        help="the checkpoint to use instead of the study's (or the profile's), e.g. a local "
                             "directory holding downloaded weights (default: the study's)")
    _add_tracking(parser)
    parser.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                        help="runs in parallel on CPU, the cores split between them (default: one per core; with "
                             "GPUs, one run per visible GPU)")
    parser.add_argument("--devices", default=None, metavar="cuda:0,cuda:1",
                        help="one run at a time on each of these devices (default: every visible GPU, else the CPU)")
    parser.add_argument("--only", type=_only, default=None, metavar="arm=NAME,seed=N",
                        help="run only the matching runs, e.g. one per job of a SLURM array (default: all)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="where runs go: 'local', processes on this machine (--jobs, --devices); or 'ray', one "
                             "Ray task per run on a Ray cluster, as many at once as it has room for; every machine "
                             "needs the same arena install and must reach the same --tracking-uri (an http:// "
                             "server); see docs/scaling.md (default: %(default)s)")
    parser.add_argument("--address", default=None, metavar="auto|ray://HOST:10001",
                        help="with --backend ray: the cluster, 'auto' for the one this machine joined with 'ray "
                             "start', or ray://HOST:10001 for a remote head node (default: none; a Ray instance on "
                             "this machine alone, started and stopped by this command)")
    parser.add_argument("--cpus-per-run", type=positive_int, default=None, metavar="N",
                        help="with --backend ray: CPUs (and torch threads) each run holds; a run also holds one GPU "
                             "when this machine has one or --devices names a cuda device (default: 1)")
    parser.add_argument("--workdir", type=Path, default=Path(".arena"), metavar="DIR",
                        help="checkpoints and caches (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="rerun finished runs from the start (default: skip them)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the runs, budget and evaluation schedule without loading a model (default: run)")


GPU_KINDS = ("h100-80gb", "h200")  # arena.plan.GPUS, named here so that --help imports nothing


def add_plan(commands) -> None:
    parser = _command(
        commands, "plan", "memory per GPU and GPU-hours of a study at a profile, before booking a cluster",
        "For every arm of the study at the profile's scale: memory per GPU by part (weights,\n"
        "trainable parameters, gradients, optimizer states, fp32 masters, the frozen reference,\n"
        "activations of the scoring layout at the micro-batch, the rollout's and the evaluation's\n"
        "KV cache), whether it fits, and the change that makes it fit (a smaller micro-batch,\n"
        "LoRA, FSDP over k GPUs); then steps, seconds per step by phase and GPU-hours per arm and\n"
        "for the whole study, from arena's FLOP accounting at a stated MFU and bandwidth\n"
        "(arena/plan/; docs/scaling.md, 'Before you book a cluster').",
        "arena plan studies/es_vs_blockgrpo.yaml --profile fast-dllm-v2-7b --gpus 8 --gpu h100-80gb", cmd_plan)
    _add_study(parser)
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="size the network from this checkpoint's config.json (default: the profile's widths, "
                             "arena/profiles.py)")
    parser.add_argument("--gpus", type=positive_int, default=1, metavar="N",
                        help="GPUs available: FSDP may shard a run over up to N of them (default: %(default)s)")
    parser.add_argument("--gpu", choices=GPU_KINDS, default="h200", help="the GPU kind (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (default: a table)")


def add_report(commands) -> None:
    parser = _command(
        commands, "report", "figures and tables comparing a study's arms, read back from MLflow",
        "Read the finished runs (and controls) of a study at its current configuration from MLflow\n"
        "(a study run earlier, elsewhere, or on a tracking server) and write into --out: tail-reward\n"
        "and mean-reward curves with 95% t bands over seeds, per-level curves, the final tail gain\n"
        "per arm, the tail profile (PNG and PDF each, 3.4 in wide, a caption file beside each), and\n"
        "summary.md / table.tex (its columns: --columns): each gain with its\n"
        "95% interval over seeds and evaluation draws, the gain over the sharpening control, and\n"
        "each arm's verdict against the reference (different / equivalent within the margin /\n"
        "inconclusive, Holm-adjusted). The files are also logged to the study's latest parent run.\n"
        "--plan instead prints the seeds and evaluation size each comparison needs, from this\n"
        "study as a pilot. What each shows: docs/reporting.md.",
        "arena report studies/es_vs_blockgrpo.yaml --x seconds", cmd_report)
    _add_study(parser)
    _add_tracking(parser)
    parser.add_argument("--x", choices=UNITS, default=None,
                        help="the budget axis of the curves (default: the study's budget unit)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for the report files (default: reports/<study name>)")
    parser.add_argument("--columns", type=table_columns, default=None, metavar="NAME,...",
                        help="table.tex's columns after the arm's, by short name, e.g. tail,over_sharpen,verdict, or "
                             "all (the names: docs/reporting.md; summary.md always has every column) (default: a set "
                             "that fits a two-column paper)")
    parser.add_argument("--plan", action="store_true",
                        help="print the seeds per arm and evaluation prompts each comparison needs (power planning) "
                             "instead of writing the report (default: write the report)")
    parser.add_argument("--margin", type=positive_float, default=None,
                        help="with --plan or --reach: the margin to decide at (default: the study's analysis.margin)")
    parser.add_argument("--share", type=share, default=0.25,
                        help="with --plan: the largest share of the variance the evaluation may hold (default: %(default)s)")
    parser.add_argument("--reach", type=reach_target, default=None, metavar="STUDY.yaml:ARM@MARK",
                        help="instead of the report: from which budget each arm gains as much tail as ARM of that "
                             "study at MARK (non-inferiority at --margin or the study's margin, fixed sequence from "
                             "the largest budget down; docs/reporting.md) (default: write the report)")
    parser.add_argument("--versus", type=versus_target, default=None, metavar="STUDY.yaml:ARM",
                        help="instead of the report: every arm against ARM of that study (its finished or imported "
                             "runs, on the same draws), at the end and at every mark both reached at equal use of "
                             "this study's budget unit (docs/reporting.md) (default: write the report)")
    parser.add_argument("--evaluation", type=evaluation_size, default=None, metavar="PROMPTSxSAMPLES",
                        help="with --plan: count the seeds for this evaluation, e.g. 1024x16 (prompts over all draws "
                             "together, samples per prompt), its variance rescaled from the pilot's (default: the pilot's)")


def add_tune(commands) -> None:
    parser = _command(
        commands, "tune", "equal-budget Optuna sweeps over the arms' options; writes the best as a study snippet",
        "Tune each arm of a study on its own Optuna study (TPE; pruned at the evaluation points)\n"
        "until every arm has the same number of finished or pruned trials, each trial a run of\n"
        "the arm logged to MLflow under one parent run. Trials live in an Optuna journal (or a\n"
        "database), so a rerun resumes the sweep, and several processes or machines can share\n"
        "it. Prints the best options per arm and writes them to --out/best.yaml, ready to paste\n"
        "into the study. The tune file's schema and the fair-comparison recipe: docs/reporting.md.",
        "arena tune tunes/es_vs_blockgrpo.yaml --trials-per-arm 8 --jobs 2", cmd_tune)
    parser.add_argument("tune", type=Path, metavar="TUNE",
                        help="a tune file (YAML): the base study, a search space per arm, trials per arm (required)")
    parser.add_argument("--trials-per-arm", type=positive_int, default=None, metavar="N",
                        help="finished or pruned trials every arm gets, no more (default: the tune file's "
                             "trials_per_arm); a larger N extends a finished sweep")
    parser.add_argument("--profile", default=None, metavar="NAME",
                        help="tune at another scale: fast-dllm-v2-1.5b or fast-dllm-v2-7b (default: the embedded tiny "
                             "model)")
    _add_tracking(parser)
    parser.add_argument("--storage", default=None, metavar="PATH|URL",
                        help="the Optuna storage: a journal file, or a database URL shared by several machines "
                             "(default: the tune file's storage, else WORKDIR/tune/<name>.journal)")
    parser.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                        help="trials in parallel on CPU, the cores split between them (default: one per core; with "
                             "GPUs, one trial per visible GPU)")
    parser.add_argument("--devices", default=None, metavar="cuda:0,cuda:1",
                        help="one trial at a time on each of these devices (default: every visible GPU, else the CPU)")
    parser.add_argument("--workdir", type=Path, default=Path(".arena"), metavar="DIR",
                        help="checkpoints, caches and the default journal (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for best.yaml (default: reports/<tune name>)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the arms, search spaces and settings without loading a model (default: tune)")


def add_ui(commands) -> None:
    parser = _command(
        commands, "ui", "open the MLflow UI on a study's tracking store",
        "Start the MLflow UI on the store that 'arena run' writes to.",
        "arena ui studies/es_vs_blockgrpo.yaml", cmd_ui)
    _add_study(parser, required=False)
    _add_tracking(parser)
    parser.add_argument("--port", type=positive_int, default=5000, metavar="PORT",
                        help="port on 127.0.0.1 (default: %(default)s)")


def add_export(commands) -> None:
    parser = _command(
        commands, "export", "write a study's finished runs to files that travel without the MLflow store",
        "Write each finished run that 'arena report' reads for the study (its (arm, seed) runs at\n"
        "the study's current configuration, and its controls) as one file, --to/<experiment>/<run\n"
        "id>.tar.gz: tags, params, every metric's history and every artifact. Runs already in\n"
        "--to are left as they are. 'arena import' restores them into another store, where\n"
        "'arena run' skips them and 'arena report' reads them (docs/tracking.md).",
        "arena export studies/confirm/multiblock.yaml --to archive", cmd_export)
    _add_study(parser)
    _add_tracking(parser)
    parser.add_argument("--to", type=Path, default=Path("archive"), metavar="DIR",
                        help="the archive folder (default: %(default)s)")


def add_import(commands) -> None:
    parser = _command(
        commands, "import", "restore archived runs ('arena export') into an MLflow store",
        "Recreate every run archived under FOLDER (or the one archive FILE) that the store lacks:\n"
        "the same tags, params, metrics with their steps and timestamps, and artifacts, under one\n"
        "parent run per experiment. A run imported before is skipped, so a long study continues\n"
        "on another machine: 'arena import archive', then 'arena run' runs only what is missing.",
        "arena import archive --tracking-uri sqlite:///mlflow.db", cmd_import)
    parser.add_argument("source", type=Path, metavar="FOLDER|FILE",
                        help="an archive folder written by 'arena export', or one .tar.gz in it (required)")
    _add_tracking(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arena", description=DESCRIPTION,
                                     epilog="Run 'arena COMMAND --help' for a command's options and an example.")
    parser.add_argument("--version", action="version", version=f"arena {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for add in (add_run, add_validate, add_plan, add_report, add_tune, add_ui, add_export, add_import, add_pretrain,
                add_sample, add_estimators):
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import os

    if os.getcwd() not in sys.path:  # studies name plugins by import path from here, as `python -m arena` does
        sys.path.insert(0, os.getcwd())
    # MLflow: no usage telemetry, and no run links printed through the progress bars (users may set either)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # arena report downloads many small files
    from arena.config import ConfigError
    from arena.model.policy import CheckpointError  # after parsing: it imports torch
    from arena.processes import leave_process_group

    try:
        args.run(args)
        code = 0
    except (UserError, CheckpointError, ConfigError) as error:
        problems = getattr(error, "problems", ())
        if len(problems) > 1:
            print(f"arena {args.command}: {len(problems)} problems:", file=sys.stderr)
            print("\n".join(f"  {p}" for p in problems), file=sys.stderr)
        else:
            print(f"arena {args.command}: error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"arena {args.command}: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # the reader went away (`arena run --dry-run | head`): stop quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not raise again
        code = 141
    return leave_process_group(code)  # a launch's process ends there (in any other, it returns the status)


if __name__ == "__main__":
    sys.exit(main())
