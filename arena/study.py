"""Study files: the schema, its validation (every mistake at once, with its YAML path and line), and runs.

A study compares arms (optimizers with their options) on shared settings, one variable at a time
(docs/studies.md). Every section but ``arms`` is optional; the values shown are the defaults (arms: an example)::

    # arena run studies/es_vs_blockgrpo.yaml
    name: es_vs_blockgrpo       # default: the file's stem; letters, digits, _ . -
    model: tiny                 # 'tiny', a local Fast-dLLM v2 directory, or a hub id
    task:                       # omitted, or without a name: noisy_arithmetic on levels [1, 2]
      name: noisy_arithmetic    # a registered task, or "package.module:Name" (a class or factory giving a Task)
      levels: null              # difficulty levels, given to the task as levels=...; null: the task's own
      source: null              # a local file (from the working directory) or "hub", for tasks with public datasets
    train:
      prompts_per_step: 16      # prompts drawn from the train split per method step
      deterministic: null       # true: deterministic GPU kernels, slower (docs/scaling.md); null: torch's defaults
    evaluation:
      prompts: 128              # fixed evaluation prompts, from split
      split: heldout            # heldout (reports) | train (the training split's own prompts: tuning)
      samples: 8                # k samples per prompt
      temperature: 1.0
      max_new_tokens: 8
      alphas: [0.1, 0.25, 0.5]  # lower-CVaR levels, each in (0, 1]
      primary_alpha: 0.25       # one of alphas
      hard_fraction: 0.25       # in (0, 1)
      points: 5                 # evaluation points including the start (>= 2), equally spaced in budget
      seed: 0                   # keys the held-out prompts and every evaluation decoding seed
      draws: 1                  # independent evaluation draws (prompts and decoding seeds) at the start and end
      draw_prompts: null        # prompts of each of draws 1..draws-1; null: prompts (draw 0's, every point's)
      draw_samples: null        # samples per prompt on draws 1..draws-1; null: samples
      level_shares: null        # {level: share}: every draw holds these shares of the task's levels; null: balanced
      decode_batch: null        # rows (prompt x sample) per generate call; null: every row at once
    budget:
      unit: samples             # samples | tokens | forward_tokens | flops | seconds (arena.budget.UNITS)
      amount: 2048              # > 0, per run
    seeds: [0, 1, 2]            # distinct non-negative integers; n means [0, ..., n-1]; {first: a, count: n} a..a+n-1
    tracking:
      uri: null                 # MLflow tracking URI (precedence is the command line's business)
      experiment: null          # null: the study name
    reference: null             # the arm the others are compared with; null: the first arm
    analysis:
      margin: null              # > 0: arms within ±margin of the reference (tail gain) can be found equivalent (TOST)
      correction: holm          # holm | bonferroni | none, over the arms compared with the reference
      level: 0.05               # of every test; intervals are 95%
      draws: null               # the evaluation draws the verdicts pool, e.g. [1, 2]; null: every draw
    controls: [frozen, sharpen] # arms that train nothing, one evaluation each (docs/reporting.md); []: none
    at: {}                      # profile -> {budget, seeds, train, evaluation} under that profile (arena.profiles)
    arms:                       # required: name -> arm, in run order
      block_grpo:
        method: block_grpo      # a registered method, or "package.module:Name" (a class with .Config)
        options: {lr: 1.0e-4}   # the method's Config fields; checked by the method's own validator
      es:
        method: es
        overrides: {train: {prompts_per_step: 32}}  # only the train section may differ per arm
        confounded_because: "ES ranks members on more prompts"  # lifts the one-variable rule
        seeds: null             # the arm's own seeds (a list or a count), e.g. more for a parity claim; null: seeds
        label: null             # its name in figures and tables (presentation, in no config hash); null: es

The one-variable rule: each arm other than the reference differs from it in exactly one variable.
A different method is one variable whatever the options; with the same method, each option whose
resolved value differs (so writing a default out is no difference) and each differing ``train`` key
counts, except options that one of the two arms does not use (a method config names them in
``inactive_options()``): a different estimator carries its own options, as a method carries its own.
An arm differing in zero or several variables is an error unless its ``confounded_because`` says why.
Numbers like ``1e-4`` read as numbers (YAML 1.2), not as text. Errors read
``studies/x.yaml:12: arms.grpo.options.lr: must be > 0, got -1``, all of them in one ``StudyError``.

In code: ``load_study(path)`` parses and validates; ``validate(raw, source)`` validates an already parsed
(perhaps rewritten) dict, in one ``arena.config.build`` of ``Study``; ``Study.runs()`` gives one ``RunSpec``
per (arm, seed), each with its built method config and its config hash. The names a study uses resolve where
they are registered: ``methods.method_class(name)``, ``rewards.load_task(name, levels)``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from arena.budget import MAX_MARK, UNITS
from arena.config import (CONVERT, IDENTITY_WHEN_SET, REQUIRED, Checked, ConfigError, Located, Problem, StudyError,
                          build, digest, located, plain, read_yaml, unknown_key)
from arena.evaluate import SHARPEN_GRID
from arena.profiles import apply_profile
from methods import MethodConfig, method_class, method_family
from rewards import load_task


NAME = re.compile(r"[A-Za-z0-9_.-]+")
DEFAULT_TASK = {"name": "noisy_arithmetic", "levels": [1, 2]}


class Section(Checked):
    """A config section: YAML lists become tuples, then the ranges are checked."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        super().__post_init__()


@dataclass(frozen=True)
class TaskSpec(Section):
    name: str = "noisy_arithmetic"
    levels: tuple[int, ...] | None = None
    source: str | None = None

    def problems(self):
        if self.levels is not None and (not self.levels or not all(type(x) is int for x in self.levels)):
            yield "levels", f"expected a non-empty list of integers (or null: the task's own), got {self.levels!r}"
            return
        if self.source not in (None, "hub") and not Path(self.source).expanduser().exists():
            yield "source", f"no such file {self.source!r} (a local file, or 'hub')"
        try:
            load_task(self.name, self.levels)
        except ConfigError as error:
            yield from ((p.path, p.message) for p in error.problems)


@dataclass(frozen=True)
class TrainSpec(Section):
    prompts_per_step: int = 16
    # identity only when set, so that a study without it keeps the config hash it had before it existed
    deterministic: bool | None = field(default=None, metadata={IDENTITY_WHEN_SET: True})

    def problems(self):
        if self.prompts_per_step < 1:
            yield "prompts_per_step", f"must be >= 1, got {self.prompts_per_step!r}"


def level_share_pairs(shares) -> tuple[tuple[int, float], ...] | None:
    """``{level: share}`` as sorted (level, share) pairs; ValueError saying what it expected."""
    if shares is None:
        return None
    if not isinstance(shares, dict) or not shares:
        raise ValueError(f"expected a mapping of difficulty levels to shares, e.g. {{1: 0.5, 2: 0.5}}, got {shares!r}")
    for level, share in shares.items():
        if type(level) is not int or type(share) not in (int, float) or not 0 < share <= 1:
            raise ValueError(f"expected integer levels with shares in (0, 1], got {level!r}: {share!r}")
    return tuple(sorted((level, float(share)) for level, share in shares.items()))


@dataclass(frozen=True)
class EvaluationSpec(Section):
    prompts: int = 128
    split: Literal["heldout", "train"] = "heldout"
    samples: int = 8
    temperature: float = 1.0
    max_new_tokens: int = 8
    alphas: tuple[float, ...] = (0.1, 0.25, 0.5)
    primary_alpha: float = 0.25
    hard_fraction: float = 0.25
    points: int = 5
    seed: int = 0
    draws: int = 1
    # the final comparison's draws may be larger than the curve's draw 0 (decoded at every point); identity only
    # when set, so that a study without them keeps the config hash it had before they existed
    draw_prompts: int | None = field(default=None, metadata={IDENTITY_WHEN_SET: True})
    draw_samples: int | None = field(default=None, metadata={IDENTITY_WHEN_SET: True})
    # stratified draws: a fixed share of prompts per difficulty level (rounded by largest remainder)
    level_shares: tuple[tuple[int, float], ...] | None = field(
        default=None, metadata={IDENTITY_WHEN_SET: True, CONVERT: level_share_pairs})
    # rows per generate call: the same tokens as one call (a row's do not depend on its batch mates), in less
    # memory (the KV cache and a block's logits grow with the rows: 1,024 at the 7B profile do not fit an H100)
    decode_batch: int | None = field(default=None, metadata={IDENTITY_WHEN_SET: True})

    def problems(self):
        for name, low in {"prompts": 1, "samples": 1, "max_new_tokens": 1, "points": 2, "seed": 0, "draws": 1,
                          "draw_prompts": 1, "draw_samples": 1, "decode_batch": 1}.items():
            if getattr(self, name) is not None and getattr(self, name) < low:
                yield name, f"must be >= {low}, got {getattr(self, name)!r}"
        for name in ("draw_prompts", "draw_samples"):
            if getattr(self, name) is not None and self.draws == 1:
                yield name, "sizes evaluation draws 1..draws-1, and with draws: 1 there are none; set draws >= 2"
        if not self.temperature >= 0:
            yield "temperature", f"must be >= 0, got {self.temperature!r}"
        if not self.alphas:
            yield "alphas", "must list at least one level in (0, 1]"
        for i, alpha in enumerate(self.alphas):
            if type(alpha) not in (int, float) or not 0 < alpha <= 1:
                yield f"alphas[{i}]", f"must be a number in (0, 1], got {alpha!r}"
        if self.primary_alpha not in self.alphas:
            yield "primary_alpha", f"must be one of alphas {list(self.alphas)}, got {self.primary_alpha!r}"
        if not 0 < self.hard_fraction < 1:
            yield "hard_fraction", f"must be in (0, 1), got {self.hard_fraction!r}"
        if self.level_shares is not None and abs(sum(share for _, share in self.level_shares) - 1) > 1e-9:
            yield "level_shares", f"must sum to 1, got {sum(share for _, share in self.level_shares):g}"

    def of_draw(self, draw: int) -> "EvaluationSpec":
        """The settings draw ``draw`` is decoded with: draw 0 this section's, draws 1.. at their own size."""
        if draw == 0:
            return self
        return dataclasses.replace(self, prompts=self.draw_prompts or self.prompts,
                                   samples=self.draw_samples or self.samples)


@dataclass(frozen=True)
class BudgetSpec(Section):
    unit: Literal[UNITS] = "samples"  # arena.budget.UNITS
    amount: float = 2048

    def problems(self):
        if not (self.amount > 0 and math.isfinite(self.amount)):
            yield "amount", f"must be a finite number > 0, got {self.amount!r}"
        elif self.amount >= MAX_MARK:  # the budget marks are MLflow steps, int64
            yield "amount", f"must be below 2**62 ({MAX_MARK:.3g}) {self.unit}, got {self.amount!r}"


@dataclass(frozen=True)
class AnalysisSpec(Section):
    margin: float | None = None
    correction: Literal["holm", "bonferroni", "none"] = "holm"
    level: float = 0.05
    draws: tuple[int, ...] | None = field(default=None, metadata={IDENTITY_WHEN_SET: True})

    def problems(self):
        if self.margin is not None and not (self.margin > 0 and math.isfinite(self.margin)):
            yield "margin", f"must be a number > 0 (the equivalence margin of the tail gain) or null, got {self.margin!r}"
        if not 0 < self.level < 0.5:
            yield "level", f"must be in (0, 0.5), got {self.level!r}"
        if self.draws is not None and (not self.draws or any(type(d) is not int or d < 0 for d in self.draws)
                                       or len(set(self.draws)) != len(self.draws)):
            yield "draws", f"must list distinct evaluation draws (0, 1, ...), or be null for all, got {list(self.draws)}"


CONTROLS = ("frozen", "sharpen")  # arena.controls evaluates them


@dataclass(frozen=True)
class TrackingSpec(Section):
    uri: str | None = None
    experiment: str | None = None  # None: the study name


def seed_list(seeds) -> tuple:
    """``seeds: n`` means [0, ..., n-1] and ``{first: a, count: n}`` [a, ..., a+n-1]; a list is the seeds themselves
    (``seed_problems`` checks them)."""
    if type(seeds) is int and seeds >= 1:
        return tuple(range(seeds))
    if (isinstance(seeds, dict) and set(seeds) == {"first", "count"} and type(seeds["first"]) is int
            and type(seeds["count"]) is int and seeds["first"] >= 0 and seeds["count"] >= 1):
        return tuple(range(seeds["first"], seeds["first"] + seeds["count"]))
    if isinstance(seeds, (list, tuple)):
        return tuple(seeds)
    raise ValueError("expected a list of non-negative integers, a count >= 1 or {first: N >= 0, count: M >= 1}, "
                     f"got {seeds!r}")


def arm_seed_list(seeds) -> tuple | None:
    return None if seeds is None else seed_list(seeds)


def seed_problems(seeds: tuple):
    if not seeds:
        yield "seeds", "must list at least one seed"
    for i, seed in enumerate(seeds):
        if type(seed) is not int or seed < 0:
            yield f"seeds[{i}]", f"must be a non-negative integer, got {seed!r}"
    if len(set(seeds)) != len(seeds):
        yield "seeds", f"must be distinct, got {list(seeds)}"


@dataclass(frozen=True)
class ArmSpec(Section):
    method: str = ""
    options: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)  # {"train": {...}}
    confounded_because: str | None = None
    seeds: tuple[int, ...] | None = field(default=None, metadata={CONVERT: arm_seed_list})  # None: the study's
    label: str | None = None  # the arm's name in reports (None: the arm's name); never part of a config hash

    def problems(self):
        if self.label is not None and not self.label.strip():
            yield "label", "must be a non-empty text (the arm's name in figures and tables), or null for the arm's name"
        if not self.method:
            yield "method", "required: a registered method or an import path 'package.module:Name'"
        else:
            try:
                self.config  # built here, once: its problems are the arm's
            except ConfigError as error:
                yield from ((p.path, p.message) for p in error.problems)
        for key, value in self.overrides.items():
            if key == "train":
                try:
                    build(TrainSpec, value, where="overrides.train")
                except ConfigError as error:
                    yield from ((p.path, p.message) for p in error.problems)
            elif key == "seeds":
                yield "overrides.seeds", "an arm's own seeds are its 'seeds' key (beside 'options'), not an override"
            elif key in SECTIONS or key == "model":
                yield f"overrides.{key}", f"only the train section may be overridden; {key} is shared by every arm"
            else:
                yield f"overrides.{key}", unknown_key(key, ["train"]).message
        if self.seeds is not None:
            yield from seed_problems(self.seeds)

    @functools.cached_property
    def config(self) -> MethodConfig:
        """The method's resolved config (defaults filled in), built once; ConfigError at ``method`` or ``options.*``."""
        return build(method_class(self.method).Config, self.options, where="options")

    def train(self, shared: TrainSpec) -> TrainSpec:
        return dataclasses.replace(shared, **self.overrides.get("train", {}))


SECTIONS = {"task": TaskSpec, "train": TrainSpec, "evaluation": EvaluationSpec, "budget": BudgetSpec,
            "tracking": TrackingSpec, "analysis": AnalysisSpec}


def named_task(task):
    """A task section without a name is the default task's, with the section's settings."""
    return {**DEFAULT_TASK, **task} if isinstance(task, dict) and "name" not in task else task


def control_list(controls) -> tuple:
    if isinstance(controls, (list, tuple)):
        return tuple(map(str, controls))
    raise ValueError(f"expected a list of controls ({', '.join(CONTROLS)}), got {controls!r}")


@dataclass(frozen=True)
class Study(Section):
    name: str = "study"
    model: str = "tiny"
    task: TaskSpec = field(default_factory=lambda: TaskSpec(**DEFAULT_TASK), metadata={CONVERT: named_task})
    train: TrainSpec = field(default_factory=TrainSpec)
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata={CONVERT: seed_list})
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    reference: str = ""  # "": the first arm
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)
    controls: tuple[str, ...] = field(default=CONTROLS, metadata={CONVERT: control_list})  # on unless opted out
    arms: dict[str, ArmSpec] = field(default_factory=dict,
                                     metadata={REQUIRED: "a mapping of arm name -> {method, options}"})
    source_path: str | None = None
    profile: str = ""  # set by a profile that rewrote the study; part of every config hash

    def __post_init__(self):
        if not self.reference and self.arms:
            object.__setattr__(self, "reference", next(iter(self.arms)))
        if self.tracking.experiment is None:
            object.__setattr__(self, "tracking", dataclasses.replace(self.tracking, experiment=self.name))
        super().__post_init__()

    def problems(self):
        if not NAME.fullmatch(self.name):
            yield "name", f"must use only letters, digits, _ . - (it names directories), got {self.name!r}"
        yield from seed_problems(self.seeds)
        if not self.arms:
            yield "arms", "must declare at least one arm: name -> {method, options}"
        for name in self.arms:
            if not NAME.fullmatch(name):
                yield f"arms.{name}", "arm names must use only letters, digits, _ . -"
            elif name in self.controls:
                yield f"arms.{name}", f"{name!r} names a control the study lists; name the arm otherwise"
        for i, control in enumerate(self.controls):
            if control not in CONTROLS:
                yield f"controls[{i}]", f"unknown control {control!r}; known controls: {', '.join(CONTROLS)}"
        if len(set(self.controls)) != len(self.controls):
            yield "controls", f"must be distinct, got {list(self.controls)}"
        drawn = self.evaluation.draws
        if self.analysis.draws and any(type(d) is int and d >= drawn for d in self.analysis.draws):
            yield "analysis.draws", (f"pools draws {list(self.analysis.draws)}, but evaluation.draws is {drawn} "
                                     f"(draws 0..{drawn - 1})")
        if self.arms and self.reference not in self.arms:
            yield "reference", f"no arm named {self.reference!r}; arms: {', '.join(self.arms)}"
            return
        for name, arm in self.arms.items():
            if name == self.reference or arm.confounded_because:
                continue
            changed = self.differences(name)
            if len(changed) != 1:
                said = f"in {len(changed)} variables ({', '.join(changed)})" if changed else "in nothing (identical)"
                yield f"arms.{name}", (f"differs from the reference arm {self.reference!r} {said}; "
                                       "change one variable per arm, or say why in confounded_because")

    def differences(self, name: str) -> list[str]:
        """The variables in which arm ``name`` differs from the reference arm."""
        arm, base = self.arms[name], self.arms[self.reference]
        if method_class(arm.method) is not method_class(base.method):
            changed = ["method"]
        else:
            # an option idle in either arm (another estimator's, say) is carried by the choice that idles it
            idle = arm.config.inactive_options() | base.config.inactive_options()
            mine, theirs = dataclasses.asdict(arm.config), dataclasses.asdict(base.config)
            changed = [f"options.{key}" for key in mine if mine[key] != theirs[key] and key not in idle]
        mine, theirs = dataclasses.asdict(arm.train(self.train)), dataclasses.asdict(base.train(self.train))
        return changed + [f"train.{key}" for key in mine if mine[key] != theirs[key]]

    @property
    def matched_decoding(self) -> bool:
        """Whether each trained run ends at its own best temperature too (``arena.runner.matched_decoding``): in a
        study with the sharpening control it is compared with, on held-out prompts."""
        return "sharpen" in self.controls and self.evaluation.split == "heldout"

    def warnings(self) -> list[str]:
        """Valid settings that cannot change a run, one line each with its arm's path: what a method class says of
        its config in its optional ``warnings(config)`` (GRPO: a surrogate or clip options at inner_iterations 1)."""
        return [f"arms.{name}: {line}" for name, arm in self.arms.items()
                for line in getattr(method_class(arm.method), "warnings", lambda config: [])(arm.config)]

    def pooled_draws(self) -> tuple[int, ...]:
        """The evaluation draws the verdicts pool: ``analysis.draws``, else every draw."""
        return self.analysis.draws or tuple(range(self.evaluation.draws))

    def labels(self) -> dict[str, str]:
        """Each arm's and control's name in figures and tables: its ``label``, else its name."""
        return {**{name: arm.label or name for name, arm in self.arms.items()}, **{c: c for c in self.controls}}

    def seeds_of(self, name: str) -> tuple[int, ...]:
        """Arm ``name``'s training seeds: its own, else the study's."""
        return self.arms[name].seeds or self.seeds

    def all_seeds(self) -> list[int]:
        """Every seed some arm trains with, sorted."""
        return sorted({seed for name in self.arms for seed in self.seeds_of(name)} | set(self.seeds))

    def runs(self) -> list["RunSpec"]:
        """One run per (arm, seed): arms in file order, then the arm's seeds."""
        return [RunSpec(self.name, name, seed, arm.method, dict(arm.options), arm.train(self.train), self.model,
                        self.task, self.evaluation, self.budget, self.profile, arm.config)
                for name, arm in self.arms.items() for seed in self.seeds_of(name)]

    def control_specs(self) -> list["ControlSpec"]:
        """One spec per control the study names, in its order."""
        return [ControlSpec(self.name, name, self.model, self.task, self.evaluation, self.budget, self.profile)
                for name in self.controls]

    def resolved_yaml(self) -> str:
        """The study as it runs (method options with their defaults filled in), loadable again."""
        arms = {name: {"method": arm.method, "options": plain(arm.config),
                       **({"overrides": plain(arm.overrides)} if arm.overrides else {}),
                       **({"confounded_because": arm.confounded_because} if arm.confounded_because else {}),
                       **({"seeds": list(arm.seeds)} if arm.seeds else {}),
                       **({"label": arm.label} if arm.label else {})}
                for name, arm in self.arms.items()}
        body = {"name": self.name, "model": self.model, **{key: plain(getattr(self, key)) for key in SECTIONS},
                "seeds": list(self.seeds), "reference": self.reference, "controls": list(self.controls), "arms": arms}
        header = f"# resolved from {self.source_path or 'code'}" + (f", profile {self.profile}" if self.profile else "")
        return header + "\n" + yaml.safe_dump(body, sort_keys=False)


@dataclass(frozen=True)
class RunSpec:
    """One (arm, seed) of a study: everything the runner needs, and the hash that identifies it."""

    study: str
    arm: str
    seed: int
    method: str
    options: dict  # as the user wrote them
    train: TrainSpec  # after the arm's overrides
    model: str
    task: TaskSpec
    evaluation: EvaluationSpec
    budget: BudgetSpec
    profile: str = ""
    config: MethodConfig | None = None  # the method's config built from options (the arm's; None: built here)
    config_hash: str = field(init=False, default="")  # sha256[:12] of what defines the run (not the arm's name)

    def __post_init__(self):
        if self.config is None:
            config = build(method_class(self.method).Config, self.options, where=f"arms.{self.arm}.options")
            object.__setattr__(self, "config", config)
        identity = {"model": self.model, "task": self.task, "train": self.train, "evaluation": self.evaluation,
                    "budget": self.budget, "method": self.method, "config": self.config, "seed": self.seed,
                    "profile": self.profile}
        object.__setattr__(self, "config_hash", digest(identity))

    @property
    def budget_unit(self) -> str:
        return self.budget.unit

    def resolved(self) -> dict:
        """A plain nested dict of the run (method options resolved), for params and artifacts."""
        return {"study": self.study, "arm": self.arm, "seed": self.seed, "config_hash": self.config_hash,
                "profile": self.profile, "model": self.model, "task": plain(self.task), "train": plain(self.train),
                "evaluation": plain(self.evaluation), "budget": plain(self.budget), "method": self.method,
                "options": plain(self.config)}


@dataclass(frozen=True)
class ControlSpec:
    """One control of a study (``arena.controls``: a start policy evaluated, never trained): what its evaluation
    depends on, and the hash that identifies it. The budget only places its final mark, so it is not hashed."""

    study: str
    arm: str  # the control's name: frozen | sharpen
    model: str
    task: TaskSpec
    evaluation: EvaluationSpec
    budget: BudgetSpec
    profile: str = ""
    seed: int = 0

    @property
    def grid(self) -> tuple[float, ...]:
        """The temperatures the control chooses among (sharpen's; none for frozen)."""
        return SHARPEN_GRID if self.arm == "sharpen" else ()

    @property
    def config_hash(self) -> str:
        return digest({"control": self.arm, "model": self.model, "task": self.task, "evaluation": self.evaluation,
                       "profile": self.profile, "grid": list(self.grid)})

    def resolved(self) -> dict:
        return {"study": self.study, "arm": self.arm, "control": self.arm, "config_hash": self.config_hash,
                "profile": self.profile, "model": self.model, "task": plain(self.task),
                "evaluation": plain(self.evaluation), "budget": plain(self.budget),
                **({"grid": list(self.grid)} if self.grid else {})}


# ---------------------------------------------------------------------------------------------
# reading a study file


def load_study(path, profile: str | None = None) -> Study:
    """Read, parse and validate a study file, as it runs under ``profile`` (``arena.profiles``; None: the
    embedded tiny model); one StudyError with every problem."""
    return parsed_study(str(path), *read_yaml(path), profile)


def parsed_study(source: str, raw, lines: dict, found: list, profile: str | None = None) -> Study:
    """``load_study`` of a file ``read_yaml`` read already (``raw`` stays as written), for a reader that needs its
    text too (``arena tune``'s snippet)."""
    if not lines:
        raise StudyError([Located("", "the file is empty; a study needs at least an 'arms:' section", source)])
    if isinstance(raw, dict):
        try:
            raw = apply_profile(raw, profile, method_family)
        except ConfigError as error:
            raise located(found + error.problems, source, lines) from None
    return validate(raw, source, lines, found, profile or "")


def validate(raw, source: str, lines: dict | None = None, found=(), profile: str = "") -> Study:
    """The Study of a parsed study file (a profile may rewrite ``raw`` first); StudyError with every problem.

    ``lines`` maps YAML paths to lines (from ``load_study``); ``found`` holds problems met while parsing.
    """
    problems: list[Problem] = list(found)
    if not isinstance(raw, dict):
        problems.append(Problem("", f"a study is a mapping of sections (model, task, ..., arms), got {raw!r}"))
        raise located(problems, source, lines or {})
    written = [str(name) for name in raw["arms"]] if isinstance(raw.get("arms"), dict) else []
    defaults = {"name": Path(source).stem, "reference": next(iter(written), None)}
    given = {**raw, **{key: value for key, value in defaults.items() if raw.get(key) is None}}
    try:
        study = build(Study, given, fixed={"source_path": source, "profile": profile}, nulls_are_defaults=True)
    except ConfigError as error:  # a broken reference arm is reported as itself, not as a missing reference
        problems += [p for p in error.problems if not (p.path == "reference" and given["reference"] in written)]
        study = None
    if problems:
        raise located(problems, source, lines or {})
    return study


__all__ = ["CONTROLS", "AnalysisSpec", "ArmSpec", "BudgetSpec", "ControlSpec", "EvaluationSpec", "RunSpec", "Study",
           "StudyError", "TaskSpec", "TrackingSpec", "TrainSpec", "digest", "load_study", "plain", "validate"]
