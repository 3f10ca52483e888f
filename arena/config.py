"""Configs built from user options with every problem collected and named by its path, and the YAML
files they come from, read with the line of every path.

A config is a dataclass whose fields carry their types (``Literal`` for every enumerated option) and
whose ``problems()`` yields ``(field, message)`` for each out-of-range value, calling
``super().problems()`` first, so a subclass never hides its parent's problems or the reverse.
``build(cls, options, where)`` checks unknown keys (with a close match), types and ranges all the way
down (a field typed as a config dataclass, or ``dict[str, Dataclass]``, nested or not, is built from its
mapping), and raises one ``ConfigError`` holding every problem, each with its path:

    optimizer[es].sigma: must be > 0, got -1
    optimizer[es].populaton: unknown option; did you mean 'population'?

A study or tune file is read by ``read_yaml`` (numbers like ``1e-4`` as numbers, each YAML path's line,
duplicate keys); ``located`` gives its problems their file and line as a ``StudyError``:
``studies/x.yaml:12: arms.grpo.options.lr: must be > 0, got -1``. Constructing a config directly in
code checks ranges too (``Checked.__post_init__``). ``import_path('package.module:Name')`` resolves the
names studies give plugins by.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(ValueError):
    """One or more problems of a configuration, each named by its path; ``problems`` holds them all."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))

    def under(self, where: str) -> "ConfigError":
        """The same problems with ``where`` prefixed to each path."""
        return ConfigError([Problem(join(where, p.path), p.message) for p in self.problems])


def join(where: str, path: str) -> str:
    if not where:
        return path
    return where + path if not path or path.startswith("[") else f"{where}.{path}"


class Checked:
    """Base of config dataclasses: ranges are checked on construction, all problems at once."""

    def problems(self) -> typing.Iterator[tuple[str, str]]:
        return iter(())

    def __post_init__(self):
        found = [Problem(name, message) for name, message in self.problems()]
        if found:
            raise ConfigError(found)


def problems_of(cls, **values) -> list[tuple[str, str]]:
    """The ``(field, message)`` problems of ``cls(**values)``, for configs that embed another's checks."""
    try:
        cls(**values)
    except ConfigError as error:
        return [(p.path, p.message) for p in error.problems]
    return []


def unknown_key(key: str, known) -> Problem:
    return Problem(str(key), f"unknown option; {suggestion(key, known)}")


def suggestion(name: str, known) -> str:
    """'did you mean X?' for the closest of ``known`` to a misspelt ``name``, else the list of them."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"


def type_problem(value, hint) -> str | None:
    """Why ``value`` does not fit the annotation ``hint``, or None when it does."""
    if _fits(value, hint):
        return None
    if typing.get_origin(hint) is typing.Literal:
        return f"must be one of {', '.join(map(repr, typing.get_args(hint)))}, got {value!r}"
    return f"expected {describe(hint)}, got {value!r}"


def describe(hint) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if origin in (list, tuple):
        return "a list"
    return {float: "a number", int: "an integer", bool: "true or false", str: "a string",
            dict: "a mapping"}.get(hint, str(hint))


def _fits(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, hint) if isinstance(hint, type) else True


CONVERT, REQUIRED = "convert", "required"  # field metadata that ``build`` reads (see there)
# field metadata of an option added after runs that must keep their hashes: ``plain`` (hence every config hash)
# leaves the field out while it holds its default (None, or an off switch's False)
IDENTITY_WHEN_SET = "identity when set"


def plain(value):
    """Dataclasses, dicts, lists and tuples as plain dicts and lists (YAML- and JSON-safe); a field marked
    ``IDENTITY_WHEN_SET`` is left out while it holds its default (so that adding it changed no config hash)."""
    if dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
                 if not (f.metadata.get(IDENTITY_WHEN_SET) and getattr(value, f.name) == f.default)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def digest(value) -> str:
    """sha256[:12] of canonical JSON: sorted keys, and numbers by value (2048 and 2048.0 hash alike). Here, below
    the study, so that what hashes a run or a control (the runner, the controls) need not import the study."""
    def canonical(v):
        if isinstance(v, dict):
            return {k: canonical(x) for k, x in v.items()}
        if isinstance(v, list):
            return [canonical(x) for x in v]
        return int(v) if type(v) is float and v.is_integer() else v

    text = json.dumps(canonical(plain(value)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build(cls, options: dict | None, where: str = "", fixed: dict | None = None, nulls_are_defaults: bool = False):
    """``cls(**options, **fixed)`` with every unknown key, wrong type and out-of-range value reported at once.

    All the way down: a field typed as a config dataclass is built from its mapping, a ``dict[str, Dataclass]``
    field (or ``dict[str, dict[str, Dataclass]]``, ...) entry by entry (an entry that fails is left out, and the
    parent's checks run on the others). A field's ``metadata[CONVERT]`` brings a value into the field's form
    first (a count into a list of seeds, say; it raises ValueError saying what it expected);
    ``metadata[REQUIRED]`` says what a missing option must be (and what a mapping field expected when it got
    something else). A parent's own problem at the path of a problem already found, or above one, is dropped: it
    judged what stood in (the default, or the entries that built). ``fixed``: values the caller sets,
    which are no options; ``nulls_are_defaults``: an option given as null takes its default (a file's top level).
    """
    if options is not None and not isinstance(options, dict):
        raise ConfigError([Problem(where or "options", f"expected a mapping of options, got {options!r}")])
    fixed = fixed or {}
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name not in fixed}
    options = {key: value for key, value in (options or {}).items()
               if not (nulls_are_defaults and value is None and key in fields)}
    hints = typing.get_type_hints(cls)
    problems = [unknown_key(key, fields) for key in options if key not in fields]
    missing = [name for name, f in fields.items() if REQUIRED in f.metadata and name not in options]
    problems += [Problem(name, f"required: {fields[name].metadata[REQUIRED]}") for name in missing]
    typed, failed = {}, set(missing)
    for key, value in options.items():
        if key in fields:
            value, found = _option(key, value, hints[key], fields[key].metadata)
            if value is not _MISSING:
                typed[key] = value
            problems += found
            failed |= {p.path for p in found}
    try:
        config = cls(**typed, **fixed)  # ranges of the well-typed options (the others keep their defaults)
    except ConfigError as error:
        problems += [p for p in error.problems
                     if not any(path == p.path or path.startswith((p.path + ".", p.path + "[")) for path in failed)]
    if problems:
        raise ConfigError(problems).under(where)
    return config


_MISSING = object()  # an option that cannot stand: its field keeps its default


def _option(key: str, value, hint, metadata) -> tuple[object, list[Problem]]:
    """One option in its field's form (or _MISSING) and its problems, with paths from the parent."""
    if CONVERT in metadata:
        try:
            value = metadata[CONVERT](value)
        except ConfigError as error:
            return _MISSING, error.under(key).problems
        except ValueError as error:
            return _MISSING, [Problem(key, str(error))]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        try:
            return build(hint, value, where=key), []
        except ConfigError as error:
            return _MISSING, error.problems
    leaf = _config_entries(hint)
    if leaf:
        if not isinstance(value, dict):
            expected = metadata.get(REQUIRED, f"a mapping of names to {leaf.__name__} options")
            return _MISSING, [Problem(key, f"expected {expected}, got {value!r}")]
        built, problems = {}, []
        for name, options in value.items():
            entry, found = _option(join(key, str(name)), options, typing.get_args(hint)[-1], {})
            if entry is not _MISSING:
                built[str(name)] = entry
            problems += found
        return built, problems
    reason = type_problem(value, hint)
    if reason:
        return _MISSING, [Problem(key, reason)]
    return (tuple(value) if typing.get_origin(hint) is tuple else value), []


def _config_entries(hint):
    """The config dataclass a ``dict[str, ...]`` hint maps names to, through nested dicts; None for another hint."""
    while typing.get_origin(hint) is dict:
        hint = typing.get_args(hint)[-1]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return hint
    return None


def import_path(path: str, field_name: str):
    """The object ``'package.module:Name'`` names; ConfigError at ``field_name`` saying why it cannot be imported."""
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as error:  # ImportError, AttributeError, or whatever the module raised on import
        raise ConfigError([Problem(field_name, f"cannot import {path!r}: {type(error).__name__}: {error}")]) from None


# ---------------------------------------------------------------------------------------------
# reading a YAML file (a study, a tune file) with the line of every path


@dataclass(frozen=True)
class Located(Problem):
    """A problem with the file and line it was found at: ``studies/x.yaml:12: arms.grpo.lr: ...``."""

    source: str = ""
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return ": ".join(part for part in (where, self.path, self.message) if part)


class StudyError(ConfigError):
    """Every problem of a study (or tune) file, one per line, each with its file, line and YAML path."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads exponents without a dot (1e-4) as numbers, as YAML 1.2 does."""


EXPONENT = re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT, list("-+0123456789"))


def _lines(node, path: str, lines: dict, found: list) -> None:
    """Map each YAML path under ``node`` to its 1-based line; note duplicate keys in ``found``."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = join(path, str(key.value))
            twice = child in lines
            if twice:
                found.append(Problem(child, f"duplicate key (first on line {lines[child]}); the later one would win"))
            lines[child] = key.start_mark.line + 1
            _lines(value, child, lines, [] if twice else found)  # not again for each key under a duplicate
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[f"{path}[{i}]"] = item.start_mark.line + 1
            _lines(item, f"{path}[{i}]", lines, found)


def read_yaml(path, kind: str = "study") -> tuple[object, dict, list[Problem]]:
    """Parse a YAML file (``1e-4`` a number) into (its data, YAML path -> 1-based line, problems met while
    parsing: duplicate keys); StudyError naming the ``kind`` of file when it cannot be read or parsed.
    An empty file gives (None, {}, [])."""
    source = str(path)
    try:
        loader = _Loader(Path(path).read_text())
    except OSError as error:
        raise StudyError([Located("", f"cannot read the {kind}: {error.strerror or error}", source)]) from None
    try:
        node = loader.get_single_node()
        raw = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (column {mark.column + 1})" if mark else ""
        message = f"invalid YAML: {getattr(error, 'problem', None) or error}{where}"
        raise StudyError([Located("", message, source, mark.line + 1 if mark else None)]) from None
    finally:
        loader.dispose()
    if node is None:
        return None, {}, []
    lines, found = {"": node.start_mark.line + 1}, []
    _lines(node, "", lines, found)
    return raw, lines, found


def located(problems: list[Problem], source: str, lines: dict) -> StudyError:
    """The problems (the first of each path) with their source and the line of their path's nearest ancestor."""
    out, seen = [], set()
    for problem in problems:
        if problem.path not in seen:
            seen.add(problem.path)
            path = problem.path  # a missing key has no line, nor has its parent section
            while path not in lines and max(path.rfind("."), path.rfind("[")) > 0:
                path = path[: max(path.rfind("."), path.rfind("["))]
            out.append(Located(problem.path, problem.message, source, lines.get(path)))
    return StudyError(sorted(out, key=lambda p: p.line or math.inf))  # in file order; stable
