"""Compute budgets in explicit units, and the evaluation points every arm shares.

A method step reports what it consumed (``Consumption``); a run adds them up and stops once it has
used its budget in the study's unit: generated ``samples`` (the default), completion ``tokens``,
model ``forward_tokens`` (generation and scoring together), or training wall-clock ``seconds``
(evaluation excluded). Evaluations happen at ``points`` equally spaced budget marks, the first at 0:
a run evaluates after the first step that reaches each mark, and logs what it had actually used there.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

UNITS = ("samples", "tokens", "forward_tokens", "seconds")


@dataclass
class Consumption:
    """What one step consumed, in the arena's budget units."""

    samples: int = 0  # completions generated
    tokens: int = 0  # completion tokens generated
    forward_tokens: int = 0  # query tokens through the model, generation and scoring together

    def __add__(self, other: "Consumption") -> "Consumption":
        return Consumption(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


@dataclass
class Meter:
    """A run's running totals: consumption and training seconds."""

    used: Consumption = dataclasses.field(default_factory=Consumption)
    seconds: float = 0.0

    def amount(self, unit: str) -> float:
        return self.seconds if unit == "seconds" else float(getattr(self.used, unit))

    def as_dict(self) -> dict[str, float]:
        return {**dataclasses.asdict(self.used), "seconds": self.seconds}


def evaluation_points(amount: float, points: int) -> list[float]:
    """``points`` budget marks from 0 to ``amount``, equally spaced."""
    return [amount * j / (points - 1) for j in range(points)]
