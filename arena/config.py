"""Configs built from user options with every problem collected and named by its path.

A config is a dataclass whose fields carry their types (``Literal`` for every enumerated option) and
whose ``problems()`` yields ``(field, message)`` for each out-of-range value, calling
``super().problems()`` first, so a subclass never hides its parent's problems or the reverse.
``build(cls, options, where)`` checks unknown keys (with a close match), types and ranges, and
raises one ``ConfigError`` holding every problem, each with its path:

    optimizer[es].sigma: must be > 0, got -1
    optimizer[es].populaton: unknown option; did you mean 'population'?

The study validator passes YAML paths as ``where``; constructing a config directly in code checks
ranges too (``Checked.__post_init__``).
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass


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
    close = difflib.get_close_matches(str(key), list(known), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
    return Problem(str(key), f"unknown option; {hint}")


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
    return {float: "a number", int: "an integer", bool: "true or false", str: "a string"}.get(hint, str(hint))


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


def build(cls, options: dict | None, where: str = ""):
    """``cls(**options)`` with every unknown key, wrong type and out-of-range value reported at once."""
    if options is not None and not isinstance(options, dict):
        raise ConfigError([Problem(where or "options", f"expected a mapping of options, got {options!r}")])
    options = dict(options or {})
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    problems = [unknown_key(key, fields) for key in options if key not in fields]
    typed = {}
    for key, value in options.items():
        if key in fields:
            reason = type_problem(value, hints[key])
            if reason:
                problems.append(Problem(key, reason))
            else:
                typed[key] = tuple(value) if typing.get_origin(hints[key]) is tuple else value
    try:
        config = cls(**typed)  # ranges of the well-typed options (the others keep their defaults)
    except ConfigError as error:
        problems += error.problems
    if problems:
        raise ConfigError(problems).under(where)
    return config
