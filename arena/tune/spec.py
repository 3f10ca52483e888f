"""The tune file: its schema (``Tune``, each search-space entry a ``Distribution``), checked on its own and
against its base study in one ``arena.config.build`` (``load_tune``: every problem at once, with its line), with
the trials' settings on the base study; and what ``arena tune --dry-run`` prints
(``describe_tune``). The schema with its defaults: the package docstring."""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import optuna

from arena.config import (CONVERT, REQUIRED, ConfigError, Located, Problem, StudyError, build, join, located,
                          read_yaml, type_problem, unknown_key)
from arena.study import (NAME, BudgetSpec, EvaluationSpec, Section, Study, TrackingSpec, digest, parsed_study,
                         plain)
from methods import method_class

OBJECTIVES = ("tail_gain", "tail_auc")
KINDS = ("uniform", "log_uniform", "int_uniform", "choice")
WRITTEN = "{uniform: [low, high]}, {log_uniform: [low, high]}, {int_uniform: [low, high]} or {choice: [a, b, ...]}"


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
        if self.name == "threshold" and self.lower is None and self.upper is None:
            yield "name", "a threshold pruner needs lower, upper or both"
        for key, owner, unset in (("percentile", "percentile", 25.0), ("lower", "threshold", None),
                                  ("upper", "threshold", None)):
            if self.name != owner and getattr(self, key) != unset:
                yield key, f"goes with name: {owner}, not {self.name!r}"

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
class Distribution(Section):
    """An option's search space, written as exactly one of the fields: ``lr: {log_uniform: [1.0e-5, 1.0e-3]}``.
    Its own checks here; the method's checks on its values, given the arm's other options: ``problems_for``."""

    uniform: tuple[float, ...] | None = None
    log_uniform: tuple[float, ...] | None = None
    int_uniform: tuple[int, ...] | None = None
    choice: tuple[bool | int | float | str | None, ...] | None = None

    @property
    def kind(self) -> str:
        return next(kind for kind in KINDS if getattr(self, kind) is not None)

    @property
    def values(self) -> tuple:
        return getattr(self, self.kind)

    def __str__(self) -> str:
        return f"{self.kind} {list(self.values)}"

    def problems(self):
        given = {kind: list(getattr(self, kind)) for kind in KINDS if getattr(self, kind) is not None}
        if len(given) != 1:
            yield "", f"expected one of {WRITTEN}; got {given}"
            return
        kind, values = self.kind, self.values
        if not values:
            yield kind, "expected a non-empty list, got []"
        elif kind == "choice":
            for i, value in enumerate(values):
                if not (value is None or isinstance(value, (bool, int, float, str))):
                    yield f"{kind}[{i}]", f"a choice is a number, a string, true/false or null, got {value!r}"
            if len(set(map(repr, values))) != len(values):
                yield kind, f"choices must be distinct, got {list(values)}"
        elif len(values) != 2 or any(type_problem(v, int if kind == "int_uniform" else float) for v in values):
            what = "integers" if kind == "int_uniform" else "numbers"
            yield kind, f"expected [low, high], two {what}, got {list(values)!r}"
        elif not (math.isfinite(values[0]) and math.isfinite(values[1]) and values[0] < values[1]):
            yield kind, f"expected finite low < high, got [{values[0]!r}, {values[1]!r}]"
        elif kind == "log_uniform" and values[0] <= 0:
            yield kind, f"a log-uniform range needs low > 0, got {values[0]!r}"

    def problems_for(self, config_cls, options: dict, option: str):
        """The method's own validator (its ``Config``) on each end of the range, or each choice, as ``option``."""
        for i, value in enumerate(self.values):
            try:
                build(config_cls, {**options, option: value})
            except ConfigError as error:
                yield from ((f"{self.kind}[{i}]", p.message if p.path == option else f"{p.path}: {p.message}")
                            for p in error.problems)

    def suggest(self, trial: optuna.Trial, option: str):
        """The trial's value of ``option``, proposed by the study's sampler."""
        if self.kind == "choice":
            return trial.suggest_categorical(option, list(self.values))
        if self.kind == "int_uniform":
            return trial.suggest_int(option, *self.values)
        return trial.suggest_float(option, *map(float, self.values), log=self.kind == "log_uniform")


def seed_count_or_list(seeds):
    """A tune file's ``seeds``: a count n (the first n integers no arm of the study uses) or a list of seeds."""
    if type(seeds) is int and seeds >= 1:
        return seeds
    if (isinstance(seeds, list) and seeds and all(type(s) is int and s >= 0 for s in seeds)
            and len(set(seeds)) == len(seeds)):
        return tuple(seeds)
    raise ValueError(f"expected a count >= 1 or a list of distinct non-negative integers, got {seeds!r}")


@dataclass(frozen=True)
class Tune(Section):
    """A tune file as written, checked on its own and, given its ``base`` study (``load_tune`` sets it), against
    it: the arms it names, each arm's space over its method's options, the trials' evaluation and budget. The
    trials run the base study as ``settings`` (named after the tune, with its evaluation, budget and seeds)."""

    study: str = field(default="", metadata={REQUIRED: "the path of the base study file"})
    name: str = ""  # "": the file's stem
    arms: tuple[str, ...] | None = None  # None: every arm of the study
    space: dict[str, dict[str, Distribution]] = field(default_factory=dict,
                                                      metadata={REQUIRED: f"per arm, option -> {WRITTEN}"})
    trials_per_arm: int = field(default=0, metadata={REQUIRED: "here or as --trials-per-arm N"})
    objective: Literal[OBJECTIVES] = "tail_gain"
    seeds: int | tuple[int, ...] = field(default=1, metadata={CONVERT: seed_count_or_list})
    evaluation: dict = field(default_factory=dict)  # merged over the study's (``trial_section``)
    budget: dict = field(default_factory=dict)
    pruner: PrunerSpec = field(default_factory=PrunerSpec)
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    seed: int = 0
    storage: str | None = None
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    # set by load_tune, never written: the base study file's Study (under the profile) and its text as written
    # (the snippet's source), and the tune file's path
    base: Study | None = None
    study_raw: dict | None = None
    source_path: str = ""

    def problems(self):
        if not NAME.fullmatch(self.name):
            yield "name", f"must use only letters, digits, _ . - (it names files), got {self.name!r}"
        if self.trials_per_arm < 1:
            yield "trials_per_arm", f"expected an integer >= 1, got {self.trials_per_arm!r}"
        if self.seed < 0:
            yield "seed", f"must be >= 0, got {self.seed!r}"
        if self.base is not None:
            yield from self.study_problems()

    def study_problems(self):
        arms = self.base.arms
        if self.arms == ():
            yield "arms", "expected a list of the study's arms (or null: all), got []"
        for i, arm in enumerate(self.arms or ()):  # a list of strings, or build has kept the default
            if arm not in arms:
                yield f"arms[{i}]", unknown_key(arm, arms).message.replace("option", "arm")
        named = [arm for arm in self.arms or () if arm in arms]
        if len(set(named)) != len(named):
            yield "arms", f"must be distinct, got {named}"
        for arm in self.space:
            if arm not in arms:
                yield f"space.{arm}", unknown_key(arm, arms).message.replace("option", "arm")
            elif arm not in self.tuned:
                yield f"space.{arm}", f"arm {arm!r} is not tuned: add it to arms, or leave it out"
        for arm in self.tuned:
            yield from self.space_problems(arm)
        for key in ("evaluation", "budget"):
            try:
                self.trial_section(key)
            except ConfigError as error:
                yield from ((p.path, p.message) for p in error.problems)

    def space_problems(self, arm: str):
        """The arm's space over its method's ``Config`` fields, each entry through the method's validator."""
        if not self.space.get(arm):
            yield f"space.{arm}", (f"required: the search space of arm {arm!r} (option -> distribution), or leave "
                                   "the arm out of arms")
            return
        method, options = self.base.arms[arm].method, self.base.arms[arm].options
        config_cls = method_class(method).Config
        fields = [f.name for f in dataclasses.fields(config_cls) if f.init]
        for option, distribution in self.space[arm].items():
            where = f"space.{arm}.{option}"
            if option not in fields:
                yield where, unknown_key(option, fields).message + f" ({method} options)"
                continue
            yield from ((join(where, path), message) for path, message in
                        distribution.problems_for(config_cls, options, option))

    @property
    def tuned(self) -> list[str]:
        """The arms to tune, each once, as written (null: every arm of the base study)."""
        if self.arms is None:
            return list(self.base.arms)
        return list(dict.fromkeys(arm for arm in self.arms if arm in self.base.arms))

    def trial_section(self, key: str) -> EvaluationSpec | BudgetSpec:
        """A trial's evaluation or budget: the tune file's, merged over the study's. The evaluation's defaults: on
        the training split, seeded one past the study's, one draw of draw 0's size (the objective reads draw 0
        only)."""
        base, cls = self.base, {"evaluation": EvaluationSpec, "budget": BudgetSpec}[key]
        default = {"seed": base.evaluation.seed + 1, "split": "train", "draws": 1, "draw_prompts": None,
                   "draw_samples": None} if key == "evaluation" else {}
        return build(cls, {**plain(getattr(base, key)), **default, **getattr(self, key)}, where=key)

    def trial_seeds(self) -> tuple[int, ...]:
        """A count n: the first n integers that are not seeds of the study, nor of any of its arms."""
        if type(self.seeds) is not int:
            return self.seeds
        taken = self.base.all_seeds()
        free = (s for s in range(len(taken) + self.seeds) if s not in taken)
        return tuple(next(free) for _ in range(self.seeds))

    @functools.cached_property
    def settings(self) -> Study:
        """The base study as trials run it: the tune's name, seeds, tracking, evaluation and budget, one draw."""
        first = self.tuned[0]
        tracking = dataclasses.replace(self.tracking, uri=self.tracking.uri or self.base.tracking.uri,
                                       experiment=self.tracking.experiment or self.name)
        return dataclasses.replace(
            self.base, name=self.name, seeds=self.trial_seeds(), tracking=tracking, reference=first,
            arms={first: dataclasses.replace(self.base.arms[first], seeds=None)},
            evaluation=self.trial_section("evaluation"), budget=self.trial_section("budget"),
            analysis=dataclasses.replace(self.base.analysis, draws=None))  # a trial has one draw

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
                      "space": {k: [d.kind, list(d.values)] for k, d in self.space[arm].items()}}
                for arm in self.tuned}
        return digest({"settings": settings, "objective": self.objective, "arms": arms})

    def storage_url(self, workdir) -> str:
        return self.storage or str(Path(workdir) / "tune" / f"{self.name}.journal")


def load_tune(path, profile: str | None = None, trials_per_arm: int | None = None) -> Tune:
    """Read, parse and validate a tune file and its base study (under ``profile``); ``trials_per_arm`` (the
    command line's) replaces the file's. One StudyError with every problem, each with its file and line."""
    source = str(path)
    raw, lines, problems = read_yaml(path, "tune file")
    if not lines:
        raise StudyError([Located("", "the file is empty; a tune needs at least 'study:' and 'space:'", source)])
    if not isinstance(raw, dict):
        problems.append(Problem("", f"a tune file is a mapping (study, space, trials_per_arm, ...), got {raw!r}"))
        raise located(problems, source, lines)
    base, study_raw, study_problems = None, None, []
    if isinstance(raw.get("study"), str):
        try:
            study_raw = read_yaml(raw["study"])  # the base study file, read once: its Study and its text
            base = parsed_study(raw["study"], *study_raw, profile)
        except StudyError as error:
            study_problems = error.problems
    given = {**raw, "name": raw.get("name") or Path(source).stem,
             **({} if trials_per_arm is None else {"trials_per_arm": trials_per_arm})}
    try:
        tune = build(Tune, given, fixed={"base": base, "study_raw": study_raw and study_raw[0], "source_path": source},
                     nulls_are_defaults=True)
    except ConfigError as error:
        problems += error.problems
    if problems or base is None:
        raise StudyError(located(problems, source, lines).problems + study_problems)
    return tune


def describe_tune(tune: Tune, workdir) -> str:
    """What ``arena tune`` would do, without loading a model (``--dry-run``)."""
    settings, base = tune.settings, tune.base
    lines = [f"tune {tune.name}: study {base.source_path}, {len(tune.tuned)} arms x {tune.trials_per_arm} trials "
             f"(finished or pruned), objective {tune.objective}",
             f"each trial: seeds {list(settings.seeds)}, budget {settings.budget.amount:g} {settings.budget.unit}, "
             f"evaluation on the {settings.evaluation.split} split, seed {settings.evaluation.seed} (the study reports on "
             f"the {base.evaluation.split} split, seed {base.evaluation.seed}), "
             f"{settings.evaluation.points} points, {settings.evaluation.prompts} prompts x "
             f"{settings.evaluation.samples} samples",
             f"pruner {describe_pruner(tune.pruner)}; sampler {describe_sampler(tune)}; "
             f"storage {tune.storage_url(workdir)}"]
    for arm in tune.tuned:
        lines.append(f"  {arm} ({base.arms[arm].method}): " + ", ".join(
            f"{option} {distribution}" for option, distribution in tune.space[arm].items()))
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
