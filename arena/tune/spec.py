"""The tune file: its schema (``TuneFile``, as written; ``Tune``, resolved on its base study), its validation
(``load_tune``: one ``arena.config.build`` and the checks against the base study, every problem at once, with
its line) and what ``arena tune --dry-run`` prints (``describe_tune``). The schema with its defaults: the
package docstring."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import optuna

from arena.config import (REQUIRED, ConfigError, Located, Problem, StudyError, build, located, read_yaml,
                          type_problem, unknown_key)
from arena.study import NAME, BudgetSpec, EvaluationSpec, Section, Study, TrackingSpec, digest, load_study, plain
from methods import method_class

OBJECTIVES = ("tail_gain", "tail_auc")
KINDS = ("uniform", "log_uniform", "int_uniform", "choice")


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
        if self.name == "percentile":  # Optuna's argument is the share kept at the top ("25.0: the top 25% are
            # kept"), ours the share pruned at the bottom, of a maximized objective
            return pruners.PercentilePruner(100.0 - self.percentile, self.n_startup_trials, self.n_warmup_steps)
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
class TuneFile(Section):
    """A tune file as written, each key checked on its own; ``arms``, ``space``, ``seeds``, ``evaluation`` and
    ``budget`` are read against the base study (``load_tune``), their checks there."""

    study: str = field(default="", metadata={REQUIRED: "the path of the base study file"})
    name: str = ""  # "": the file's stem
    arms: object = None
    space: object = None
    trials_per_arm: object = field(default=None, metadata={REQUIRED: "here or as --trials-per-arm N"})
    objective: Literal[OBJECTIVES] = "tail_gain"
    seeds: object = 1
    evaluation: object = field(default_factory=dict)
    budget: object = field(default_factory=dict)
    pruner: PrunerSpec = field(default_factory=PrunerSpec)
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    seed: int = 0
    storage: str | None = None
    tracking: TrackingSpec = field(default_factory=TrackingSpec)

    def problems(self):
        if not NAME.fullmatch(self.name):
            yield "name", f"must use only letters, digits, _ . - (it names files), got {self.name!r}"
        if type_problem(self.trials_per_arm, int) or self.trials_per_arm < 1:
            yield "trials_per_arm", f"expected an integer >= 1, got {self.trials_per_arm!r}"
        if self.seed < 0:
            yield "seed", f"must be >= 0, got {self.seed!r}"


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
        """The one-arm study a trial runs: the arm with ``options`` on the tune's settings, without controls (a
        trial is scored at the study's temperature, and matched decoding would only add to its cost)."""
        spec = dataclasses.replace(self.base.arms[arm], options=dict(options), confounded_because=None, seeds=None)
        return dataclasses.replace(self.settings, arms={arm: spec}, reference=arm, controls=())

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
    given = {**raw, "name": raw.get("name") or Path(source).stem,
             **({} if trials_per_arm is None else {"trials_per_arm": trials_per_arm})}
    try:
        spec = build(TuneFile, given, nulls_are_defaults=True)
    except ConfigError as error:
        problems += error.problems
        spec = None

    base, study_problems = None, []
    if isinstance(raw.get("study"), str):
        try:
            base = load_study(raw["study"], profile)
        except StudyError as error:
            study_problems = error.problems
    if base is None:
        raise StudyError(located(problems, source, lines).problems + study_problems)
    arms = tuned_arms(raw.get("arms"), base, problems)
    space = search_space(raw.get("space"), arms, base, problems)
    shared = trial_sections(raw, base, problems)
    seeds = trial_seeds(raw.get("seeds"), base, problems)
    if problems:
        raise located(problems, source, lines)
    first = arms[0]
    tracking = dataclasses.replace(spec.tracking, uri=spec.tracking.uri or base.tracking.uri,
                                   experiment=spec.tracking.experiment or spec.name)
    settings = dataclasses.replace(base, name=spec.name, seeds=tuple(seeds), tracking=tracking, reference=first,
                                   arms={first: dataclasses.replace(base.arms[first], seeds=None)}, **shared,
                                   analysis=dataclasses.replace(base.analysis, draws=None))  # a trial has one draw
    raw_arms = read_yaml(base.source_path)[0]["arms"]
    return Tune(spec.name, source, base, settings, {arm: raw_arms[arm] for arm in arms}, space, spec.trials_per_arm,
                spec.objective, spec.pruner, spec.sampler, spec.seed, spec.storage, tracking)


def tuned_arms(arms, base: Study, problems: list) -> list[str]:
    """The arms to tune, each once (null: every arm of the base study)."""
    if arms is None:
        return list(base.arms)
    if not isinstance(arms, list) or not arms:
        problems.append(Problem("arms", f"expected a list of the study's arms (or null: all), got {arms!r}"))
        return []
    for i, arm in enumerate(arms):
        if not isinstance(arm, str) or arm not in base.arms:
            problems.append(Problem(f"arms[{i}]", unknown_key(arm, base.arms).message.replace("option", "arm")))
    arms = [arm for arm in arms if isinstance(arm, str) and arm in base.arms]
    if len(set(arms)) != len(arms):
        problems.append(Problem("arms", f"must be distinct, got {arms}"))
    return list(dict.fromkeys(arms))


def search_space(given, arms: list[str], base: Study, problems: list) -> dict:
    """arm -> option -> (kind, values) for every tuned arm, over its method's Config fields."""
    space = {}
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
    return space


def trial_sections(raw: dict, base: Study, problems: list) -> dict:
    """A trial's evaluation and budget: the tune file's, merged over the study's (evaluation: on the training
    split, seeded one past the study's, one draw of draw 0's size, since the objective reads draw 0 only, unless
    the tune file says otherwise)."""
    shared = {}
    one_draw = {"draws": 1, "draw_prompts": None, "draw_samples": None}
    for key, cls, default in (("evaluation", EvaluationSpec, {"seed": base.evaluation.seed + 1, "split": "train",
                                                               **one_draw}),
                              ("budget", BudgetSpec, {})):
        given = raw.get(key) or {}
        if not isinstance(given, dict):
            problems.append(Problem(key, f"expected a mapping merged over the study's {key}, got {given!r}"))
            given = {}
        try:
            shared[key] = build(cls, {**plain(getattr(base, key)), **default, **given}, where=key)
        except ConfigError as error:
            problems += error.problems
    return shared


def trial_seeds(seeds, base: Study, problems: list) -> list[int]:
    """A trial's training seeds: a count n (the first n integers that are not seeds of the study, nor of any of its
    arms; null: 1) or a list."""
    seeds = 1 if seeds is None else seeds
    if type(seeds) is int and seeds >= 1:
        taken = base.all_seeds()
        free = (s for s in range(len(taken) + seeds) if s not in taken)
        return [next(free) for _ in range(seeds)]
    if not (isinstance(seeds, list) and seeds and all(type(s) is int and s >= 0 for s in seeds)
            and len(set(seeds)) == len(seeds)):
        problems.append(Problem("seeds", f"expected a count >= 1 or a list of distinct non-negative integers, "
                                         f"got {seeds!r}"))
        return [0]
    return seeds


def describe_tune(tune: Tune, workdir) -> str:
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
