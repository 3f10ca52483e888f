"""What each ``arena`` command does once its arguments are parsed (``arena.cli`` parses them): call the floors
below and print. A command imports what it needs when it runs, so ``--help`` stays fast; a mistake found here
raises ``UserError``: one line, exit 2, no traceback."""
from __future__ import annotations

import sys
from pathlib import Path


class UserError(Exception):
    """A mistake in the command line or its inputs; printed without a traceback."""



def cmd_pretrain(args) -> None:
    import dataclasses

    from arena.model.tiny import cache_root, embedded, matches_within_noise, pretrain, shipped_report

    recipe = embedded(args.model)[0]
    config = dataclasses.replace(recipe, steps=args.steps) if args.steps else recipe
    path = args.out or cache_root() / f"{args.model}-{config.digest()}"
    report = pretrain(config, path, progress=not args.quiet)
    print(f"{args.model} model built in {report['seconds']:.0f} s (config {report['digest']}): {path}")
    if not (embedded(args.model)[1] / "pretrain.json").is_file():
        print(f"no {args.model} checkpoint ships yet: nothing to compare with ({report['heldout_greedy']} greedy, "
              f"{report['heldout_sampled']} sampled)")
        return
    shipped = shipped_report(args.model)
    same_config = shipped.get("digest") == report["digest"]
    measure = "exact match" if config.task == "noisy_arithmetic" else "mean reward"
    print(f"held-out {measure} per difficulty level ({config.task}), rebuilt" + (" | shipped" if same_config else ""))
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
                           threshold=args.threshold, order=args.order, sub_block_cache=args.sub_block_cache)
    text = args.prompt if args.raw else chat_prompt(args.prompt, policy.tokenizer)
    prompt = policy.encode(text)
    if not prompt:
        raise UserError("--prompt: the prompt is empty after tokenization")
    out = generate(policy, [prompt] * args.n, config, seed=args.seed)
    for i, text in enumerate(out.texts):
        print(f"[{i}] {args.prompt}{text}")


def cmd_estimators(args) -> None:
    from arena import report
    from arena.estimator_bench import measure
    from arena.model import load_policy
    from arena.config import ConfigError
    from rewards import load_task

    try:
        task = load_task(args.task)
    except ConfigError as error:
        raise UserError(f"--task: {error.problems[0].message}") from None
    policy = load_policy(args.model)
    examples = task.examples("heldout", n=args.prompts, seed=args.seed)
    prompts = [policy.encode(task.prompt(e, policy.tokenizer)) for e in examples]
    measured = measure(policy, prompts, args.draws, args.nodes, args.repeats, args.max_new_tokens, args.seed)
    paths = report.write_estimators(measured, args.out)
    print(paths["md"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))


def _study(args):
    import dataclasses

    from arena.study import load_study

    study = load_study(args.study, args.profile)
    model = getattr(args, "model", None)
    return dataclasses.replace(study, model=model) if model else study


def _warn(args, study) -> None:
    """Print the study's warnings (``Study.warnings``): valid, so the command goes on."""
    for line in study.warnings():
        print(f"arena {args.command}: warning: {args.study}: {line}", file=sys.stderr, flush=True)


def _written_store(args, study) -> str:
    """The tracking URI the command reads ``study``'s runs from (``resolve_uri``); ``UserError`` when it names a
    SQLite file that does not exist (opening it would create an empty store)."""
    from arena.tracking import missing_store, resolve_uri

    uri = resolve_uri(args.tracking_uri, study.tracking.uri)
    if missing_store(uri):
        raise UserError(f"no tracking store at {missing_store(uri)}: pass the --tracking-uri that 'arena run' wrote to")
    return uri


def cmd_validate(args) -> None:
    study = _study(args)
    _warn(args, study)
    runs = study.runs()
    own = [name for name, arm in study.arms.items() if arm.seeds]
    shape = (f"{len(study.arms)} arms x {len(study.seeds)} seeds" if not own else
             f"{len(study.arms)} arms, {len(study.seeds)} seeds each but "
             + ", ".join(f"{name} {len(study.seeds_of(name))}" for name in own))
    print(f"{args.study}: valid; {shape} = {len(runs)} runs, "
          f"reference arm {study.reference!r}" + (f", profile {study.profile}" if study.profile else ""))


def cmd_run(args) -> None:
    from arena import processes, scheduler

    study = _study(args)
    _warn(args, study)
    runs = scheduler.select(study.runs(), args.only or {})
    if not runs:
        from arena.config import suggestion

        arm = args.only.get("arm", "")
        if arm and arm not in study.arms:
            raise UserError(f"--only arm={arm}: {args.study} has no arm {arm!r}; {suggestion(arm, study.arms)}")
        only = ",".join(f"{key}={value}" for key, value in args.only.items())
        raise UserError(f"--only {only}: no run of {args.study} matches (its seeds: "
                        f"{', '.join(map(str, study.all_seeds()))})")
    launched = processes.launched_processes()
    if launched > 1:
        _check_launch(args, runs, launched)
    if args.dry_run:
        print(scheduler.describe_runs(study, runs))
        if study.profile:
            from arena.plan import format_plan

            print("\n" + format_plan(_plan(args, study, gpus=1, gpu="h200")))
            print("(arena plan STUDY --profile P --gpus N --gpu h100-80gb|h200 for other machines)")
        return
    if args.backend == "local" and (args.address or args.cpus_per_run):
        raise UserError("--address and --cpus-per-run go with --backend ray")
    if args.backend == "ray" and args.jobs:
        raise UserError("--jobs goes with --backend local: Ray runs as many runs at once as the cluster has CPUs "
                        "(--cpus-per-run each) and GPUs for")
    if launched > 1:
        device = processes.join_process_group()  # main() leaves it, with the exit status
        placement = scheduler.Placement(devices=(device,), processes=launched)
        _check_outcomes(scheduler.run_study(study, runs, placement, args.tracking_uri, args.workdir, args.force))
        return
    placement = scheduler.Placement.auto(args.jobs, args.devices, len(runs), backend=args.backend,
                                         address=args.address, cpus=args.cpus_per_run or 1)
    _check_outcomes(scheduler.run_study(study, runs, placement, args.tracking_uri, args.workdir, args.force))


def _plan(args, study, gpus: int, gpu: str) -> dict:
    """``arena.plan.plan_study`` for the network of --model's config.json, else of the profile."""
    import json

    from arena.plan import Shape, plan_study
    from arena.profiles import SHAPES

    config = Path(args.model) / "config.json" if args.model else None
    if config and (args.command == "plan" or config.is_file()):  # a dry run's --model may be a hub id
        if not config.is_file():
            raise UserError(f"--model {args.model}: no config.json there to size the network from")
        fields = json.loads(config.read_text())
    elif study.profile:
        fields = SHAPES[study.profile]
    else:
        raise UserError(f"{args.study}: the plan sizes a profile's network: pass --profile fast-dllm-v2-7b (or "
                        "fast-dllm-v2-1.5b), or --model DIR")
    return plan_study(study, Shape.of(fields), gpu, gpus)


def cmd_plan(args) -> None:
    import json

    from arena.plan import format_plan

    study = _study(args)
    plan = _plan(args, study, args.gpus, args.gpu)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))


def _check_launch(args, runs, processes: int) -> None:
    """Under torchrun or accelerate launch, the processes share one run: exactly one must be selected."""
    if len(runs) != 1:
        raise UserError(f"launched as {processes} processes (WORLD_SIZE={processes}), which train one run together, "
                        f"but {len(runs)} runs of {args.study} are selected: choose one with --only arm=NAME,seed=N "
                        "(or start without torchrun / accelerate launch to run them one per process)")
    if args.jobs or args.devices or args.backend != "local":
        raise UserError("--jobs, --devices and --backend place several runs; under torchrun or accelerate launch the "
                        "processes share one run, each on cuda:LOCAL_RANK (or the CPU)")


def _check_outcomes(outcomes) -> None:
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        raise UserError(f"{len(failed)} of {len(outcomes)} runs failed; rerun the same command to resume them once "
                        "fixed:\n" + "\n".join(f"  {o.arm} seed {o.seed}: {o.error}" for o in failed))


def cmd_report(args) -> None:
    from arena.report.comparison import write_study_report
    from arena.report.records import ReportError
    from arena.tracking import Tracker

    study = _study(args)
    uri = _written_store(args, study)
    out = args.out or Path("reports") / study.name
    tracker = Tracker(uri, study.tracking.experiment)
    if args.reach:
        from arena.report.reach import reach
        from arena.report.records import read_results
        from arena.study import load_study

        path, arm, mark = args.reach
        other = load_study(path, args.profile)
        other_tracker = Tracker(uri, other.tracking.experiment)
        margin = args.margin if args.margin is not None else study.analysis.margin
        if margin is None:
            raise UserError("--reach: no margin to test non-inferiority at: pass --margin or declare analysis.margin")
        try:
            print(reach(read_results(tracker, study), read_results(other_tracker, other), tracker, other_tracker,
                        arm, mark, margin))
        except ReportError as error:
            raise UserError(str(error)) from None
        return
    if args.versus:
        from arena.report.reach import versus
        from arena.report.records import read_results
        from arena.study import load_study

        path, arm = args.versus
        other = load_study(path, args.profile)
        other_tracker = Tracker(uri, other.tracking.experiment)
        try:
            print(versus(read_results(tracker, study), read_results(other_tracker, other), tracker, other_tracker, arm))
        except ReportError as error:
            raise UserError(str(error)) from None
        return
    if args.plan:
        from arena.report.planning import plan
        from arena.report.records import read_results

        try:
            print(plan(read_results(tracker, study), args.margin, args.share, args.evaluation))
        except (ReportError, ValueError) as error:
            raise UserError(str(error)) from None
        return
    try:
        report = write_study_report(study, tracker, out, args.x, columns=args.columns)
    except ReportError as error:
        raise UserError(str(error)) from None
    print((out / "summary.md").read_text())
    print(f"wrote {out}: " + ", ".join(path.name for path in report.paths))
    if report.logged_to:
        print(f"logged to the parent run {report.logged_to} ({uri}, experiment {study.tracking.experiment}), "
              "artifacts report/")
    for note in report.notes:
        print(note)


def cmd_tune(args) -> None:
    from arena import tune as tuning
    from arena.scheduler import Placement

    spec = tuning.load_tune(args.tune, args.profile, args.trials_per_arm)
    if args.storage:
        import dataclasses

        spec = dataclasses.replace(spec, storage=args.storage)
    if args.dry_run:
        print(tuning.describe_tune(spec, args.workdir))
        return
    placement = Placement.auto(args.jobs, args.devices, len(spec.tuned) * spec.trials_per_arm)
    result = tuning.sweep(spec, placement, args.tracking_uri, args.workdir, args.out or Path("reports") / spec.name)
    if result.gave_up:
        raise UserError("stopped after as many failed trials as --trials-per-arm: " + "; ".join(
            f"{o.arm} ({o.counts.failed} failed, e.g. {o.errors[-1]})" for o in result.gave_up))


def cmd_export(args) -> None:
    from arena.archive import ArchiveError, export_study
    from arena.tracking import Tracker

    study = _study(args)
    uri = _written_store(args, study)
    try:
        counts = export_study(Tracker(uri, study.tracking.experiment), study, args.to)
    except ArchiveError as error:
        raise UserError(str(error)) from None
    print(f"{study.name}: {counts.written} run{'s' if counts.written != 1 else ''} written to {args.to}, "
          f"{counts.present} there already")


def cmd_import(args) -> None:
    from arena.archive import ArchiveError, import_archives
    from arena.tracking import resolve_uri

    uri = resolve_uri(args.tracking_uri)
    try:
        counts = import_archives(args.source, uri)
    except ArchiveError as error:
        raise UserError(str(error)) from None
    print(f"{args.source}: {counts.written} run{'s' if counts.written != 1 else ''} imported into {uri}, "
          f"{counts.present} there already")


def _check_port_free(port: int) -> None:
    """``UserError`` when something already listens on 127.0.0.1:``port``: MLflow would fail to bind and log it
    among INFO lines, while the printed link opened whatever holds the port."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: a port in TIME_WAIT is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise UserError(f"--port {port}: 127.0.0.1:{port} is in use ({error.strerror}), perhaps by another MLflow "
                            "UI; choose another port with --port N") from None


def cmd_ui(args) -> None:
    import os

    from arena.tracking import missing_store, resolve_uri, ui_url

    study = _study(args) if args.study else None
    uri = resolve_uri(args.tracking_uri, study.tracking.uri if study else None)
    if not uri.startswith("sqlite:") and not uri.startswith("file:") and "://" in uri:
        raise UserError(f"{uri} is a tracking server: open it in a browser")
    _check_port_free(args.port)
    experiment = study.tracking.experiment if study and not missing_store(uri) else None
    url = ui_url(f"http://127.0.0.1:{args.port}", uri, experiment)
    print(f"MLflow UI for {uri} (Ctrl-C stops it): open {url}", flush=True)
    # a viewer: without MLflow's job runner (GenAI scorers, trace rollups), whose processes slow the start
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    os.execvp(sys.executable, [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--port",
                               str(args.port), "--host", "127.0.0.1", "--workers", "1"])  # one user: one worker starts fastest
