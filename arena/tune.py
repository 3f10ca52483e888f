"""Equal-budget hyperparameter sweeps: ``arena tune TUNE.yaml`` gives every tuned arm of a study the same
number of Optuna trials, each trial one run of the study, and writes the best options as a study snippet.

A tune file names a base study and a search space per arm over the options of the arm's method. Every
section but ``study`` and ``space`` is optional; the values shown are the defaults (``space``: an example)::

    # arena tune tunes/es_vs_blockgrpo.yaml --trials-per-arm 8
    name: es_vs_blockgrpo_tune  # default: the file's stem; names the Optuna studies (<name>/<arm>), the journal,
                                # the MLflow experiment and reports/<name>/
    study: studies/es_vs_blockgrpo.yaml  # required: the base study (a path from the working directory)
    arms: null                  # the arms to tune, a list; null: every arm of the study
    space:                      # required: per tuned arm, option -> distribution, over the method's Config fields
      block_grpo:
        lr: {log_uniform: [1.0e-5, 1.0e-3]}
        draws: {choice: [1, 2, 4]}       # also: uniform: [low, high], int_uniform: [low, high]
      es:
        sigma: {log_uniform: [3.0e-3, 1.0e-1]}
        alpha: {log_uniform: [3.0e-3, 1.0e-1]}
    trials_per_arm: null        # required here or as --trials-per-arm N: finished + pruned trials per arm
    objective: tail_gain        # tail_gain: the tail gain at the end | tail_auc: the area under the tail-reward
                                # curve divided by the budget (the average tail reward over the run)
    seeds: 1                    # training seeds per trial: a count n (the first n integers that are not
                                # seeds of the study) or a list; a trial's value is the mean over its seeds
    evaluation: {}              # merged over the study's evaluation section; defaults: split train (the training
                                # split's own prompts, never the held-out ones the study reports on), seed the study's + 1
    budget: {}                  # merged over the study's budget section
    pruner: {name: median, n_startup_trials: 2, n_warmup_steps: 0}  # median | percentile | threshold | none
    sampler: {n_startup_trials: 10}  # TPE: the first n trials of each arm are random (Optuna's default 10)
    seed: 0                     # keys each arm's TPE sampler (with the arm and the trial number)
    storage: null               # null: <workdir>/tune/<name>.journal, an Optuna journal file; a file path;
                                # or a database URL (postgresql://..., mysql://..., sqlite:///...)
    tracking: {uri: null, experiment: null}  # uri null: the study's; experiment null: the tune's name

Trials go to the arm with the fewest until every arm has ``trials_per_arm`` finished or pruned ones, and
no arm gets more (a trial one too many, claimed by a parallel worker at the same moment, is failed before
it runs: ``arena.surplus``). A failed trial (a reward that raised, a non-finite step) does not count; an
arm stops after ``trials_per_arm`` of them. A trial runs the arm with the sampled options over its seeds
through ``arena.runner.execute`` (an MLflow child run per seed, tagged ``arena.tune`` and ``arena.trial``)
and reports the objective's running value at each evaluation point after the start to the pruner; a
trial left RUNNING by a dead process (this machine: its pid is gone; another: no heartbeat for
``STALE_AFTER`` s) is failed and queued again with its options (``arena.retry_of``), and the retry resumes
its runs from their checkpoints. The recipe and the details: docs/reporting.md, "Tuning".

In code: ``load_tune(path, profile, trials_per_arm)`` parses and validates (every problem at once, with
its line); ``sweep(tune, placement, uri, workdir, out)`` runs and writes ``best.yaml``.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import optuna
import yaml
from optuna.trial import TrialState

from arena.config import ConfigError, Problem, build, type_problem, unknown_key
from arena.rng import name_key, seed_of
from arena.scheduler import arm_width, exit_with_parent
from arena.study import (NAME, BudgetSpec, EvaluationSpec, Located, Section, Study, StudyError, TrackingSpec,
                         digest, load_study, located, method_class, plain, read_yaml, validate)

OBJECTIVES = ("tail_gain", "tail_auc")
KINDS = ("uniform", "log_uniform", "int_uniform", "choice")
KEYS = ("name", "study", "arms", "space", "trials_per_arm", "objective", "seeds", "evaluation", "budget", "pruner",
        "sampler", "seed", "storage", "tracking")
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
HEARTBEAT_SECONDS = 60  # a running trial records the time this often ...
STALE_AFTER = 600  # ... and one silent this long is taken for dead (on another machine; here: its pid is gone)
HOST = socket.gethostname()
# trial user attributes
# (a FAIL trial with neither ERROR nor SURPLUS was stale: its process died, and a retry carries RETRY_OF)
OWNER, BEAT, RETRY_OF, ERROR, SURPLUS = ("arena.owner", "arena.heartbeat", "arena.retry_of", "arena.error",
                                         "arena.surplus")


# ---------------------------------------------------------------------------------------------
# the tune file


@dataclass(frozen=True)
class PrunerSpec(Section):
    """Optuna's pruner by name; steps are budget used (the evaluation marks)."""

    name: Literal["median", "percentile", "threshold", "none"] = "median"
    n_startup_trials: int = 2  # median, percentile: trials of the arm that finish before any is pruned
    n_warmup_steps: int = 0  # budget used before a trial may be pruned
    percentile: float = 25.0  # percentile: pruned below this percentile of the others at the same step
    lower: float | None = None  # threshold: pruned when the running value is below ...
    upper: float | None = None  # ... or above

    def problems(self):
        for key in ("n_startup_trials", "n_warmup_steps"):
            if getattr(self, key) < 0:
                yield key, f"must be >= 0, got {getattr(self, key)!r}"
        if self.name == "percentile" and not 0 < self.percentile < 100:
            yield "percentile", f"must be in (0, 100), got {self.percentile!r}"
        if self.name != "percentile" and self.percentile != 25.0:
            yield "percentile", f"goes with name: percentile, not {self.name!r}"
        if self.name == "threshold" and self.lower is None and self.upper is None:
            yield "name", "a threshold pruner needs lower, upper or both"
        for key in ("lower", "upper"):
            if self.name != "threshold" and getattr(self, key) is not None:
                yield key, f"goes with name: threshold, not {self.name!r}"

    def make(self) -> optuna.pruners.BasePruner:
        pruners = optuna.pruners
        if self.name == "median":
            return pruners.MedianPruner(self.n_startup_trials, self.n_warmup_steps)
        if self.name == "percentile":
            return pruners.PercentilePruner(self.percentile, self.n_startup_trials, self.n_warmup_steps)
        if self.name == "threshold":
            return pruners.ThresholdPruner(self.lower, self.upper, self.n_warmup_steps)
        return pruners.NopPruner()


@dataclass(frozen=True)
class SamplerSpec(Section):
    """Optuna's TPE sampler: its first ``n_startup_trials`` trials per arm are drawn at random (Optuna's
    default 10 makes 10 of 16 trials random search); stated in the plan, the parent run and best.yaml."""

    n_startup_trials: int = 10

    def problems(self):
        if self.n_startup_trials < 1:
            yield "n_startup_trials", f"must be >= 1, got {self.n_startup_trials!r}"


@dataclass(frozen=True)
class Tune:
    """A validated tune file. ``settings`` is the base study as trials run it (named after the tune, with the
    tune's evaluation, budget and seeds); ``space[arm][option] = (kind, values)``."""

    name: str
    source_path: str
    base: Study
    settings: Study
    raw_arms: dict  # the study file's arms as written (for the snippet)
    space: dict
    trials_per_arm: int
    objective: str = "tail_gain"
    pruner: PrunerSpec = field(default_factory=PrunerSpec)
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    seed: int = 0
    storage: str | None = None
    tracking: TrackingSpec = field(default_factory=TrackingSpec)

    @property
    def arms(self) -> list[str]:
        return list(self.space)

    def study_for(self, arm: str, options: dict) -> Study:
        """The one-arm study a trial runs: the arm with ``options`` on the tune's settings."""
        spec = dataclasses.replace(self.base.arms[arm], options=dict(options), confounded_because=None)
        return dataclasses.replace(self.settings, arms={arm: spec}, reference=arm)

    def identity(self) -> str:
        """What makes two trials of an arm comparable: the settings, the objective, the arms and their spaces.
        Not ``trials_per_arm`` (a sweep may be extended), the pruner or the sampler seed."""
        settings = {key: getattr(self.settings, key) for key in ("model", "task", "train", "evaluation", "budget",
                                                                  "seeds", "profile")}
        arms = {arm: {"method": self.base.arms[arm].method, "options": self.base.arms[arm].options,
                      "overrides": self.base.arms[arm].overrides,
                      "space": {k: [kind, list(values)] for k, (kind, values) in self.space[arm].items()}}
                for arm in self.arms}
        return digest({"settings": settings, "objective": self.objective, "arms": arms})

    def storage_url(self, workdir) -> str:
        return self.storage or str(Path(workdir) / "tune" / f"{self.name}.journal")


def _scalar(raw: dict, key: str, hint, default, problems: list):
    value = raw.get(key)
    if value is None:
        return default
    reason = type_problem(value, hint)
    if reason:
        problems.append(Problem(key, reason))
        return default
    return value


def _distribution(spec, option: str, where: str, config_cls, options: dict, problems: list):
    """(kind, values) of one search-space entry, or None; every problem of it in ``problems``."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        problems.append(Problem(where, "expected one of {uniform: [low, high]}, {log_uniform: [low, high]}, "
                                       f"{{int_uniform: [low, high]}}, {{choice: [a, b, ...]}}; got {spec!r}"))
        return None
    kind, values = next(iter(spec.items()))
    where = f"{where}.{kind}"
    if not isinstance(values, list) or not values:
        problems.append(Problem(where, f"expected a non-empty list, got {values!r}"))
        return None
    found = len(problems)
    if kind == "choice":
        for i, value in enumerate(values):
            if not (value is None or isinstance(value, (bool, int, float, str))):
                problems.append(Problem(f"{where}[{i}]", f"a choice is a number, a string, true/false or null, "
                                                         f"got {value!r}"))
        if len(set(map(repr, values))) != len(values):
            problems.append(Problem(where, f"choices must be distinct, got {values}"))
    else:
        number = int if kind == "int_uniform" else float
        if len(values) != 2 or any(type_problem(v, number) for v in values):
            what = "integers" if number is int else "numbers"
            problems.append(Problem(where, f"expected [low, high], two {what}, got {values!r}"))
            return None
        low, high = values
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            problems.append(Problem(where, f"expected finite low < high, got [{low!r}, {high!r}]"))
        elif kind == "log_uniform" and low <= 0:
            problems.append(Problem(where, f"a log-uniform range needs low > 0, got {low!r}"))
    if len(problems) > found:
        return None
    for i, value in enumerate(values):  # the method's own validator on each end (or choice)
        try:
            build(config_cls, {**options, option: value})
        except ConfigError as error:
            problems += [Problem(f"{where}[{i}]", p.message if p.path == option else f"{p.path}: {p.message}")
                         for p in error.problems]
    return kind, tuple(values)


def load_tune(path, profile: str | None = None, trials_per_arm: int | None = None) -> Tune:
    """Read, parse and validate a tune file and its base study (under ``profile``); ``trials_per_arm`` (the
    command line's) replaces the file's. One StudyError with every problem, each with its file and line."""
    source = str(path)
    raw, lines, found = read_yaml(path, "tune file")
    if not lines:
        raise StudyError([Located("", "the file is empty; a tune needs at least 'study:' and 'space:'", source)])
    problems: list[Problem] = list(found)
    if not isinstance(raw, dict):
        problems.append(Problem("", f"a tune file is a mapping (study, space, trials_per_arm, ...), got {raw!r}"))
        raise located(problems, source, lines)
    problems += [unknown_key(key, KEYS) for key in raw if key not in KEYS]
    name = _scalar(raw, "name", str, Path(source).stem, problems)
    if not NAME.fullmatch(name):
        problems.append(Problem("name", f"must use only letters, digits, _ . - (it names files), got {name!r}"))
    objective = _scalar(raw, "objective", Literal[OBJECTIVES], "tail_gain", problems)
    seed = _scalar(raw, "seed", int, 0, problems)
    if seed < 0:
        problems.append(Problem("seed", f"must be >= 0, got {seed!r}"))
    storage = _scalar(raw, "storage", str, None, problems)
    trials = trials_per_arm if trials_per_arm is not None else raw.get("trials_per_arm")
    if trials is None:
        problems.append(Problem("trials_per_arm", "required: here or as --trials-per-arm N"))
    elif type_problem(trials, int) or trials < 1:
        problems.append(Problem("trials_per_arm", f"expected an integer >= 1, got {trials!r}"))
    try:
        pruner = build(PrunerSpec, raw.get("pruner"), where="pruner")
    except ConfigError as error:
        problems += error.problems
        pruner = PrunerSpec()
    try:
        sampler = build(SamplerSpec, raw.get("sampler"), where="sampler")
    except ConfigError as error:
        problems += error.problems
        sampler = SamplerSpec()
    try:
        tracking = build(TrackingSpec, raw.get("tracking"), where="tracking")
    except ConfigError as error:
        problems += error.problems
        tracking = TrackingSpec()

    base, study_problems = None, []
    if not isinstance(raw.get("study"), str):
        problems.append(Problem("study", f"required: the path of the base study file, got {raw.get('study')!r}"))
    else:
        try:
            base = load_study(raw["study"], profile)
        except StudyError as error:
            study_problems = error.problems
    if base is None:
        raise StudyError(located(problems, source, lines).problems + study_problems)

    arms = raw.get("arms")
    if arms is None:
        arms = list(base.arms)
    elif not isinstance(arms, list) or not arms:
        problems.append(Problem("arms", f"expected a list of the study's arms (or null: all), got {arms!r}"))
        arms = []
    for i, arm in enumerate(arms):
        if not isinstance(arm, str) or arm not in base.arms:
            problems.append(Problem(f"arms[{i}]", unknown_key(arm, base.arms).message.replace("option", "arm")))
    arms = [arm for arm in arms if isinstance(arm, str) and arm in base.arms]
    if len(set(arms)) != len(arms):
        problems.append(Problem("arms", f"must be distinct, got {arms}"))
    arms = list(dict.fromkeys(arms))

    space, given = {}, raw.get("space")
    if not isinstance(given, dict):
        problems.append(Problem("space", "required: per arm, option -> {log_uniform|uniform|int_uniform: "
                                         f"[low, high]}} or {{choice: [...]}}, got {given!r}"))
        given = {}
    for arm in given:
        if arm not in base.arms:
            problems.append(Problem(f"space.{arm}", unknown_key(arm, base.arms).message.replace("option", "arm")))
        elif arm not in arms:
            problems.append(Problem(f"space.{arm}", f"arm {arm!r} is not tuned: add it to arms, or leave it out"))
    for arm in arms:
        entries = given.get(arm)
        if not isinstance(entries, dict) or not entries:
            problems.append(Problem(f"space.{arm}", f"required: the search space of arm {arm!r} (option -> "
                                                    "distribution), or leave the arm out of arms"))
            continue
        config_cls = method_class(base.arms[arm].method).Config
        fields = [f.name for f in dataclasses.fields(config_cls) if f.init]
        space[arm] = {}
        for option, spec in entries.items():
            where = f"space.{arm}.{option}"
            if option not in fields:
                problems.append(Problem(where, unknown_key(option, fields).message + f" ({base.arms[arm].method} "
                                                                                     "options)"))
                continue
            parsed = _distribution(spec, option, where, config_cls, base.arms[arm].options, problems)
            if parsed:
                space[arm][option] = parsed

    shared = {}
    for key, cls, default in (("evaluation", EvaluationSpec, {"seed": base.evaluation.seed + 1, "split": "train"}),
                              ("budget", BudgetSpec, {})):
        given_section = raw.get(key) or {}
        if not isinstance(given_section, dict):
            problems.append(Problem(key, f"expected a mapping merged over the study's {key}, got {given_section!r}"))
            given_section = {}
        try:
            shared[key] = build(cls, {**plain(getattr(base, key)), **default, **given_section}, where=key)
        except ConfigError as error:
            problems += error.problems
    seeds = raw.get("seeds", 1)
    if type(seeds) is int and seeds >= 1:
        free = (s for s in range(len(base.seeds) + seeds) if s not in base.seeds)
        seeds = [next(free) for _ in range(seeds)]
    elif not (isinstance(seeds, list) and seeds and all(type(s) is int and s >= 0 for s in seeds)
              and len(set(seeds)) == len(seeds)):
        problems.append(Problem("seeds", f"expected a count >= 1 or a list of distinct non-negative integers, "
                                         f"got {seeds!r}"))
        seeds = [0]
    if problems:
        raise located(problems, source, lines)
    first = arms[0]
    tracking = dataclasses.replace(tracking, uri=tracking.uri or base.tracking.uri,
                                   experiment=tracking.experiment or name)
    settings = dataclasses.replace(base, name=name, seeds=tuple(seeds), tracking=tracking, reference=first,
                                   arms={first: base.arms[first]}, **shared)
    raw_arms = read_yaml(base.source_path)[0]["arms"]
    return Tune(name, source, base, settings, {arm: raw_arms[arm] for arm in arms}, space, trials, objective, pruner,
                sampler, seed, storage, tracking)


def plan(tune: Tune, workdir) -> str:
    """What ``arena tune`` would do, without loading a model (``--dry-run``)."""
    settings, base = tune.settings, tune.base
    lines = [f"tune {tune.name}: study {base.source_path}, {len(tune.arms)} arms x {tune.trials_per_arm} trials "
             f"(finished or pruned), objective {tune.objective}",
             f"each trial: seeds {list(settings.seeds)}, budget {settings.budget.amount:g} {settings.budget.unit}, "
             f"evaluation on the {settings.evaluation.split} split, seed {settings.evaluation.seed} (the study reports on "
             f"the {base.evaluation.split} split, seed {base.evaluation.seed}), "
             f"{settings.evaluation.points} points, {settings.evaluation.prompts} prompts x "
             f"{settings.evaluation.samples} samples",
             f"pruner {describe_pruner(tune.pruner)}; sampler {describe_sampler(tune)}; "
             f"storage {tune.storage_url(workdir)}"]
    for arm in tune.arms:
        lines.append(f"  {arm} ({base.arms[arm].method}): " + ", ".join(
            f"{option} {kind} {list(values)}" for option, (kind, values) in tune.space[arm].items()))
    return "\n".join(lines)


def describe_sampler(tune: Tune) -> str:
    startup = tune.sampler.n_startup_trials
    share = "all of them" if startup >= tune.trials_per_arm else f"{startup} of {tune.trials_per_arm}"
    return f"TPE, the first {startup} trials of each arm random ({share}; n_startup_trials), keyed by seed {tune.seed}"


def describe_pruner(pruner: PrunerSpec) -> str:
    if pruner.name == "none":
        return "none (every trial runs its whole budget)"
    return (f"{pruner.name} (not before {pruner.n_startup_trials} trials of the arm have finished, nor before "
            f"{pruner.n_warmup_steps:g} of a trial's budget is used)")


# ---------------------------------------------------------------------------------------------
# Optuna: storage, studies, sampler, trials


def open_storage(url: str):
    """A database URL (``scheme://``) as RDB storage; anything else an Optuna journal file."""
    if "://" in url:
        return optuna.storages.RDBStorage(url)
    from optuna.storages.journal import JournalFileBackend

    Path(url).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(url)))


class TrialSeeded(optuna.samplers.BaseSampler):
    """``TPESampler`` (Optuna's defaults) re-created for each trial with a seed keyed by (seed, arm, trial
    number): reproducible given the history, and a resumed sweep does not replay the first proposals."""

    def __init__(self, seed: int, arm: str, n_startup_trials: int = 10):
        self.seed, self.arm, self.n_startup_trials = seed, arm, n_startup_trials
        self.inner = self._sampler(0)

    def _sampler(self, number: int) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(n_startup_trials=self.n_startup_trials,
                                          seed=seed_of(self.seed, name_key(self.arm), number) % 2**32)

    def __repr__(self) -> str:
        return (f"TPESampler(Optuna {optuna.__version__} defaults, n_startup_trials={self.n_startup_trials}, "
                f"seed=key({self.seed}, {self.arm!r}, trial number))")

    def before_trial(self, study, trial):
        self.inner = self._sampler(trial.number)
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values):
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


class TuneError(ConfigError):
    """The storage holds a sweep of the same name with other settings."""


def open_studies(tune: Tune, storage) -> dict[str, optuna.Study]:
    """One Optuna study per arm, ``<name>/<arm>``, created or loaded; a loaded one must have the same identity."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies, identity = {}, tune.identity()
    for arm in tune.arms:
        study = optuna.create_study(storage=storage, study_name=f"{tune.name}/{arm}", direction="maximize",
                                    sampler=TrialSeeded(tune.seed, arm, tune.sampler.n_startup_trials),
                                    pruner=tune.pruner.make(),
                                    load_if_exists=True)
        known = study.user_attrs.get("arena.identity")
        if known is None:
            study.set_user_attr("arena.identity", identity)
        elif known != identity:
            raise TuneError([Problem("", f"the storage already holds a sweep {tune.name!r} of arm {arm!r} with "
                                         "other settings (study, evaluation, budget, seeds, objective or space): "
                                         "give this tune another name or storage, or delete the old one")])
        studies[arm] = study
    return studies


@dataclass
class Counts:
    finished: int = 0
    pruned: int = 0
    running: int = 0
    waiting: int = 0
    failed: int = 0  # by an error (not stale, not surplus)

    @property
    def counted(self) -> int:
        return self.finished + self.pruned + self.running + self.waiting


def counts(study: optuna.Study) -> Counts:
    found = Counts()
    for trial in study.get_trials(deepcopy=False):
        if trial.state == TrialState.COMPLETE:
            found.finished += 1
        elif trial.state == TrialState.PRUNED:
            found.pruned += 1
        elif trial.state == TrialState.RUNNING:
            found.running += 1
        elif trial.state == TrialState.WAITING:
            found.waiting += 1
        elif trial.state == TrialState.FAIL and ERROR in trial.user_attrs:
            found.failed += 1
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tell(study: optuna.Study, trial, *args, **kwargs) -> bool:
    """``study.tell``; False when the trial had ended already (failed as stale by another worker)."""
    try:
        study.tell(trial, *args, **kwargs)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True


def fail_stale(study: optuna.Study) -> list[int]:
    """Trials left RUNNING by a dead process: marked FAIL and enqueued again with the same options
    (``arena.retry_of``: the first trial of the chain, whose MLflow runs the retry resumes)."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial.user_attrs.get(OWNER) or {}
        beat = trial.user_attrs.get(BEAT) or (trial.datetime_start.timestamp() if trial.datetime_start else time.time())
        dead = owner.get("host") == HOST and owner.get("pid") != os.getpid() and not _alive(owner.get("pid", 0))
        if not (dead or time.time() - beat > STALE_AFTER):
            continue
        if not _tell(study, trial.number, state=TrialState.FAIL):
            continue  # another worker failed it first
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.user_attrs.get(RETRY_OF, trial.number)},
                            skip_if_exists=False)
        failed.append(trial.number)
    return failed


def next_arm(tune: Tune, studies: dict) -> str | None:
    """The arm with work left and the fewest trials (finished, pruned, running or queued); None when none has."""
    candidates = []
    for i, arm in enumerate(tune.arms):
        fail_stale(studies[arm])
        found = counts(studies[arm])
        if found.finished + found.pruned >= tune.trials_per_arm or found.failed >= tune.trials_per_arm:
            continue
        if found.waiting or found.counted < tune.trials_per_arm:
            candidates.append((found.counted, i, arm))
    return min(candidates)[2] if candidates else None


def claim(tune: Tune, study: optuna.Study):
    """A new (or queued) trial of ``study``, or None when it would be one more than ``trials_per_arm``."""
    trial = study.ask()
    numbers = sorted(t.number for t in study.get_trials(deepcopy=False, states=COUNTED))
    if trial.number in numbers and numbers.index(trial.number) >= tune.trials_per_arm:
        trial.set_user_attr(SURPLUS, True)
        _tell(study, trial, state=TrialState.FAIL)
        return None
    trial.set_user_attr(OWNER, {"host": HOST, "pid": os.getpid()})
    trial.set_user_attr(BEAT, time.time())
    return trial


class Heartbeat:
    """Records the time on the trial every ``HEARTBEAT_SECONDS`` while it runs (the stale test of other machines)."""

    def __init__(self, trial):
        self.trial, self.stop_event = trial, threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self):
        while not self.stop_event.wait(HEARTBEAT_SECONDS):
            try:
                self.trial.set_user_attr(BEAT, time.time())
            except Exception:  # the trial ended meanwhile
                return

    def stop(self):
        self.stop_event.set()
        self.thread.join()


# ---------------------------------------------------------------------------------------------
# the objective


def area(marks, values) -> float:
    """Trapezoid area under the curve over its budget span, divided by the span (the curve's average); the
    value itself for a single point. The same definition as ``arena report``'s tail-reward AUC."""
    if len(marks) < 2:
        return float(values[0])
    total = sum((values[i] + values[i + 1]) / 2 * (marks[i + 1] - marks[i]) for i in range(len(marks) - 1))
    return total / (marks[-1] - marks[0])


def objective_value(objective: str, curve: list[tuple[int, float, float]]) -> float:
    """The objective of a curve of (mark, tail_reward, tail_gain) so far: its running value."""
    if objective == "tail_gain":
        return curve[-1][2]
    return area([m for m, _, _ in curve], [r for _, r, _ in curve])


def curve_of(tracker, run_id: str) -> list[tuple[int, float, float]]:
    """(mark, tail_reward, tail_gain) at each evaluation point of a run, from MLflow."""
    rewards = dict(tracker.history(run_id, "eval/tail_reward"))
    gains = dict(tracker.history(run_id, "eval/tail_gain"))
    return [(mark, rewards[mark], gains[mark]) for mark in sorted(rewards) if mark in gains]


# ---------------------------------------------------------------------------------------------
# running trials


def _suggest(trial, option: str, kind: str, values: tuple):
    if kind == "choice":
        return trial.suggest_categorical(option, list(values))
    if kind == "int_uniform":
        return trial.suggest_int(option, values[0], values[1])
    return trial.suggest_float(option, float(values[0]), float(values[1]), log=kind == "log_uniform")


def _share_start(shared: Path, folder: Path, study: str) -> None:
    """Starting evaluations computed by earlier trials, linked into this trial's folder (the runner's cache)."""
    target = folder / study
    target.mkdir(parents=True, exist_ok=True)
    for cached in shared.glob("start-*.npz"):
        if not (target / cached.name).exists():
            try:
                os.link(cached, target / cached.name)
            except OSError:
                shutil.copyfile(cached, target / cached.name)


def _publish_start(shared: Path, folder: Path, study: str) -> None:
    for cached in (folder / study).glob("start-*.npz"):
        if not (shared / cached.name).exists():
            staging = shared / f"{cached.name}.{os.getpid()}.tmp"
            shutil.copyfile(cached, staging)
            os.replace(staging, shared / cached.name)


@dataclass
class TrialResult:
    arm: str
    number: int
    state: str  # finished | pruned | failed | dropped (taken for dead by another worker, and queued again)
    value: float | None = None
    params: dict = field(default_factory=dict)
    error: str = ""  # why it failed, or where it was pruned


def run_trial(tune: Tune, arm: str, study: optuna.Study, trial, tracker, parent_id: str, workdir: Path,
              device: str | None, position: int, progress: bool) -> TrialResult:
    """One trial: sample the options, run the arm over the tune's seeds (pruned at an evaluation point when the
    pruner says so), tell Optuna the mean objective."""
    from arena.evaluate import RewardError
    from arena.runner import Stop, execute

    root = int(trial.user_attrs.get(RETRY_OF, trial.number))
    params = {option: _suggest(trial, option, kind, values) for option, (kind, values) in tune.space[arm].items()}
    result = TrialResult(arm, trial.number, "failed", params=params)
    shared = Path(workdir) / "tune" / tune.name
    folder = shared / arm / f"trial{root}"
    extra = {"arena.tune": tune.name, "arena.trial": str(root)}
    heartbeat = Heartbeat(trial)
    span, reported = tune.settings.budget.amount, set()
    try:
        one = tune.study_for(arm, {**tune.base.arms[arm].options, **params})
        runs = one.runs()
        values = []
        for i, run in enumerate(runs):
            identity = {"arena.study": run.study, "arena.arm": run.arm, "arena.seed": str(run.seed),
                        "arena.config_hash": run.config_hash, **extra}
            checkpoint = folder / run.study / run.arm / f"seed{run.seed}-{run.config_hash}" / "checkpoint.pt"
            for previous in tracker.find_runs(identity):  # a retry without a checkpoint starts a new run
                if previous.status in ("RUNNING", "KILLED") and not checkpoint.exists():
                    tracker.finish(previous.run_id, "FAILED")
            _share_start(shared, folder, run.study)
            curve: list[tuple[int, float, float]] = []
            last_seed = i == len(runs) - 1

            def on_evaluation(mark, metrics, i=i, run=run, identity=identity, curve=curve, last_seed=last_seed):
                if not curve and mark > 0:  # resumed: the points logged before the interruption
                    found = tracker.find_runs(identity)
                    curve += [p for p in curve_of(tracker, found[0].run_id) if p[0] < mark] if found else []
                curve.append((mark, metrics["tail_reward"], metrics["tail_gain"]))
                if mark == 0:  # the starting evaluation is every trial's: nothing to compare
                    return
                for end in range(2, len(curve) + 1):
                    step = int(i * span + curve[end - 1][0])
                    if step not in reported:
                        trial.report(objective_value(tune.objective, curve[:end]), step)
                        reported.add(step)
                final = last_seed and mark >= int(round(span))
                if not final and trial.should_prune():
                    raise Stop(f"at {mark:g} {run.budget_unit}" + (f" of seed {run.seed}" if len(runs) > 1 else ""))

            outcome = execute(run, one, tracker, parent_id, folder, device, position, False, progress,
                              on_evaluation, extra)
            _publish_start(shared, folder, run.study)
            trial.set_user_attr(f"arena.run_id.seed{run.seed}", outcome.run_id)
            values.append(objective_value(tune.objective, curve_of(tracker, outcome.run_id)))
        result.value, result.state = sum(values) / len(values), "finished"
        told = _tell(study, trial, result.value)
    except Stop as stop:
        result.state, result.error = "pruned", str(stop)
        told = _tell(study, trial, state=TrialState.PRUNED)
    except optuna.exceptions.UpdateFinishedTrialError:  # reporting to a trial another worker failed as stale
        told = False
    except (RewardError, FloatingPointError, ValueError, RuntimeError) as error:  # ConfigError is a ValueError
        result.error = f"{type(error).__name__}: {error}"
        try:
            trial.set_user_attr(ERROR, result.error[:1000])
            told = _tell(study, trial, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            told = False
    except BaseException:  # interrupted: the next invocation resumes it from its checkpoint
        if _tell(study, trial, state=TrialState.FAIL):
            study.enqueue_trial(params, user_attrs={RETRY_OF: root}, skip_if_exists=False)
        raise
    finally:
        heartbeat.stop()
    if not told:  # another worker took it for dead and queued a retry, which resumes from the checkpoints
        result.state, result.value = "dropped", None
        return result
    shutil.rmtree(folder, ignore_errors=True)
    return result


def describe(result: TrialResult, tune: Tune, done: Counts) -> str:
    value = f"{tune.objective} {result.value:+.4f}, " if result.value is not None else ""
    options = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.params.items())
    tail = f" {result.error}" if result.state == "pruned" else f": {result.error}" if result.error else ""
    return (f"{result.arm} trial {result.number} ({options}): {value}{result.state}{tail} "
            f"[{done.finished + done.pruned} of {tune.trials_per_arm} finished or pruned]")


def work(tune: Tune, storage_url: str, tracker, parent_id: str, workdir: Path, device: str | None, slot: int,
         progress: bool) -> list[TrialResult]:
    """A worker: trials of the arm with the fewest until every arm has its trials."""
    studies = open_studies(tune, open_storage(storage_url))
    results = []
    while (arm := next_arm(tune, studies)) is not None:
        trial = claim(tune, studies[arm])
        if trial is None:
            continue
        result = run_trial(tune, arm, studies[arm], trial, tracker, parent_id, workdir, device, slot, progress)
        results.append(result)
        print(describe(result, tune, counts(studies[arm])), flush=True)
    return results


def _worker(tune, storage_url, uri, experiment, parent_id, workdir, device, slot, threads, progress):
    import torch

    from arena.tracking import Tracker

    torch.set_num_threads(threads)
    return work(tune, storage_url, Tracker(uri, experiment), parent_id, Path(workdir), device, slot, progress)


# ---------------------------------------------------------------------------------------------
# the sweep and its outcome


@dataclass
class ArmOutcome:
    arm: str
    counts: Counts
    best_value: float | None = None
    best_trial: int | None = None
    best_params: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def outcomes(tune: Tune, studies: dict) -> list[ArmOutcome]:
    found = []
    for arm in tune.arms:
        study = studies[arm]
        outcome = ArmOutcome(arm, counts(study))
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        if complete:
            best = max(complete, key=lambda t: (t.value, -t.number))
            outcome.best_value, outcome.best_trial, outcome.best_params = best.value, best.number, dict(best.params)
        outcome.errors = [t.user_attrs[ERROR] for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                          if ERROR in t.user_attrs]
        found.append(outcome)
    return found


def table(tune: Tune, found: list[ArmOutcome]) -> str:
    width = arm_width(o.arm for o in found)
    lines = [f"{'arm':<{width}} {'best ' + tune.objective:>16} {'finished':>8} {'pruned':>6} {'failed':>6} "
             f"{'best trial':>10}  best options"]
    for o in found:
        best = f"{o.best_value:+.4f}" if o.best_value is not None else "-"
        options = ", ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in o.best_params.items())
        lines.append(f"{o.arm:<{width}} {best:>16} {o.counts.finished:>8} {o.counts.pruned:>6} {o.counts.failed:>6} "
                     f"{'-' if o.best_trial is None else o.best_trial:>10}  {options or '-'}")
    lines.append(f"best {tune.objective}: the best trial's own value, no interval (the maximum of noisy trials runs high: "
                 "rerun the winner on fresh seeds with arena run and read its interval there, docs/reporting.md)")
    return "\n".join(lines)


def snippet(tune: Tune, found: list[ArmOutcome]) -> str:
    """The tuned arms as written in the study, with their best options, as an ``arms:`` section that validates
    in the study (an arm tuned apart from a reference of the same method says so in confounded_because)."""
    base, arms = tune.base, {}
    for o in found:
        if o.best_trial is None:
            continue
        entry = copy.deepcopy(tune.raw_arms[o.arm])
        if base.profile:  # the profile's settings replace options; an arm's at: block goes on top
            at = entry.setdefault("at", {})
            at[base.profile] = {**(at.get(base.profile) or {}), **o.best_params}
        else:
            entry["options"] = {**(entry.get("options") or {}), **o.best_params}
        arms[o.arm] = entry
    raw = read_yaml(base.source_path)[0]
    from arena.profiles import apply_profile

    invalid = []
    for _ in range(len(arms) + 1):  # add confounded_because where the tuned options break the one-variable rule
        try:
            validate(apply_profile({**raw, "arms": {**raw["arms"], **arms}}, base.profile or None), base.source_path)
            break
        except StudyError as error:
            moved = [p.path.removeprefix("arms.") for p in error.problems
                     if p.path.removeprefix("arms.") in arms and "differs from the reference arm" in p.message]
            for arm in moved:
                arms[arm]["confounded_because"] = f"options tuned separately by arena tune ({tune.name})"
            if not moved:
                invalid = [f"{p.path}: {p.message}" for p in error.problems]
                break
    header = [f"# arena tune {tune.source_path}: the best of {tune.trials_per_arm} trials per arm by {tune.objective}",
              f"# (budget {tune.settings.budget.amount:g} {tune.settings.budget.unit}, seeds "
              f"{list(tune.settings.seeds)}, evaluation {tune.settings.evaluation.split} split seed "
              f"{tune.settings.evaluation.seed}"
              + (f", profile {base.profile}" if base.profile else "") + ")",
              f"# sampler {describe_sampler(tune)}; pruner {describe_pruner(tune.pruner)}",
              f"# paste over the arms of the same names in {base.source_path}, then: arena run {base.source_path}"
              + (f" --profile {base.profile}" if base.profile else ""),
              f"# tuning seeds: {list(tune.settings.seeds)}. The best of many trials on these seeds is biased up (the "
              "winner's curse): confirm it on seeds tuning never used before a study relies on it"
              + (f" (the study's {list(base.seeds)} are such seeds)" if not set(base.seeds) & set(tune.settings.seeds)
                 else f" (WARNING: the study's seeds {sorted(set(base.seeds) & set(tune.settings.seeds))} were tuned on)")]
    missing = [o.arm for o in found if o.best_trial is None]
    if missing:
        header.append(f"# no finished trial (not here): {', '.join(missing)}")
    header += [f"# does not validate in the study: {line}" for line in invalid]
    return "\n".join(header) + "\n" + yaml.safe_dump({"arms": arms}, sort_keys=False)


@dataclass
class SweepResult:
    arms: list[ArmOutcome]
    trials: list[TrialResult]  # those of this invocation
    snippet_path: Path
    gave_up: list[ArmOutcome]  # arms that stopped short of trials_per_arm after as many failed trials


def sweep(tune: Tune, placement, tracking_uri: str | None, workdir: Path, out: Path,
          progress: bool = True) -> SweepResult:
    """Trials until every arm has ``trials_per_arm`` finished or pruned ones, under one MLflow parent run;
    prints the best per arm and writes ``out/best.yaml``."""
    import concurrent.futures
    import multiprocessing

    from arena.runner import git_commit
    from arena.tracking import Tracker, resolve_uri

    from arena.model.tiny import MODELS

    if tune.settings.model not in MODELS:  # missing weights: one error before anything starts
        from arena.model.policy import resolve_checkpoint

        resolve_checkpoint(tune.settings.model)
    tracker = Tracker(resolve_uri(tracking_uri, tune.tracking.uri), tune.tracking.experiment)
    storage_url = tune.storage_url(workdir)
    studies = open_studies(tune, open_storage(storage_url))
    for arm in tune.arms:
        for number in fail_stale(studies[arm]):
            print(f"{arm} trial {number}: its process is gone; retried with the same options", flush=True)
    print(f"arena tune {tune.name}: {len(tune.arms)} arms x {tune.trials_per_arm} trials, objective {tune.objective}, "
          f"evaluation {tune.settings.evaluation.split} split seed {tune.settings.evaluation.seed}, "
          f"seeds {list(tune.settings.seeds)}, sampler {describe_sampler(tune)}, pruner {describe_pruner(tune.pruner)}, "
          f"{placement.slots} at a time, storage {storage_url}, "
          f"tracking {tracker.uri} (experiment {tracker.experiment})", flush=True)
    if (tune.settings.evaluation.split, tune.settings.evaluation.seed) == (tune.base.evaluation.split,
                                                                           tune.base.evaluation.seed):
        print(f"warning: evaluation {tune.base.evaluation.split} split seed {tune.base.evaluation.seed} is the study's: "
              "the settings are selected on the prompts that report the results (the default is the train split, "
              "seed the study's + 1)", flush=True)
    tags = {"arena.study": tune.name, "arena.tune": tune.name, "arena.base_study": tune.base.name,
            "arena.objective": tune.objective, "arena.git_commit": git_commit(),
            "arena.profile": tune.base.profile or "none", "arena.optuna": optuna.__version__,
            "arena.sampler": repr(studies[tune.arms[0]].sampler), "arena.pruner": repr(tune.pruner),
            "arena.tune_seeds": ",".join(map(str, tune.settings.seeds))}
    parent_id = tracker.start_parent(f"{tune.name} {time.strftime('%Y-%m-%d %H:%M:%S')}", tags)
    tracker.log_text(parent_id, Path(tune.source_path).read_text(), "tune.yaml")
    started = time.time()
    try:
        if placement.slots == 1:
            trials = work(tune, storage_url, tracker, parent_id, Path(workdir), placement.device(0), 0, progress)
        else:
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(placement.slots, mp_context=context,
                                                        initializer=exit_with_parent) as pool:
                futures = [pool.submit(_worker, tune, storage_url, tracker.uri, tracker.experiment, parent_id,
                                       str(workdir), placement.device(slot), slot, placement.threads(), progress)
                           for slot in range(placement.slots)]
                trials = [result for future in futures for result in future.result()]
    except BaseException:
        tracker.finish(parent_id, "KILLED")
        raise
    found = outcomes(tune, studies)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "best.yaml"
    text = snippet(tune, found)
    path.write_text(text)
    tracker.log_text(parent_id, text, "best.yaml")
    tracker.log_metrics(parent_id, {f"tune/best_{o.arm}": o.best_value for o in found if o.best_value is not None}, 0)
    result = SweepResult(found, trials, path, [o for o in found if o.counts.failed >= tune.trials_per_arm and
                                               o.counts.finished + o.counts.pruned < tune.trials_per_arm])
    tracker.finish(parent_id, "FAILED" if result.gave_up else "FINISHED")
    ran = {state: sum(t.state == state for t in trials) for state in ("finished", "pruned", "failed")}
    print(f"\n{len(trials)} trials in this invocation ({ran['finished']} finished, {ran['pruned']} pruned, "
          f"{ran['failed']} failed) in {time.time() - started:.0f} s\n")
    print(table(tune, found))
    print(f"\nwrote {path}: paste its arms into {tune.base.source_path}, then arena run and arena report")
    return result


__all__ = ["PrunerSpec", "SamplerSpec", "SweepResult", "Tune", "TuneError", "load_tune", "plan", "sweep"]
