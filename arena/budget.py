"""Compute budgets in explicit units, and the evaluation points every arm shares.

A method step reports what it consumed (``Consumption``); a run adds them up and stops once it has
used its budget in the study's unit (``UNITS``, the one list every other place takes its units from):
generated ``samples`` (the default), completion ``tokens``, model ``forward_tokens`` (generation and scoring
together), token-``flops`` (forward and backward passes, ``token_flops``), or training wall-clock
``seconds`` (evaluation excluded). Evaluations happen at ``points`` equally spaced budget marks, the
first at 0: a run evaluates after the first step that reaches each mark, and logs what it had actually
used there.

Token-FLOPs (docs/studies.md, "The `flops` unit"). A token through a weight matrix of n entries costs 2n
FLOPs forward (a multiply and an add per entry). Backward costs 2n for the gradient with respect to
the activations, which every weight between the loss and the first trained parameter passes on,
frozen or not, plus 2n for the gradient with respect to the weight, only where the weight trains. So
with P the parameters a token traverses and P_t those that train, a forward token costs 2·P and a
backward token 2·P + 2·P_t: 4·P under full fine-tuning (the familiar 6·P per trained token), about
2·P under LoRA. Attention's score and value products (which grow with the context) and elementwise
work are left out, as in Kaplan et al. 2020's 6N: the axis counts parameter work, the same way for
every method.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

UNITS = ("samples", "tokens", "forward_tokens", "flops", "seconds")
MAX_MARK = 2**62  # marks are MLflow steps (int64): a flops budget must stay below this


def token_flops(forward_tokens: int, backward_tokens: int, traversed: int, trained: int) -> int:
    """Token-FLOPs of ``forward_tokens`` forward and ``backward_tokens`` backward token passes through
    ``traversed`` parameters of which ``trained`` train: 2·P per forward token, 2·P + 2·P_t per backward
    token (a backward token is also counted as a forward one: it was forwarded first)."""
    return 2 * traversed * forward_tokens + (2 * traversed + 2 * trained) * backward_tokens


@dataclass
class Consumption:
    """What one step consumed, in the arena's budget units."""

    samples: int = 0  # completions generated
    tokens: int = 0  # completion tokens generated
    forward_tokens: int = 0  # query tokens through the model, generation and scoring together
    flops: int = 0  # token-FLOPs of those forward tokens and of the backward passes (token_flops)

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


def mark_of(amount: float) -> int:
    """The metric step of a budget ``amount``: rounded to the nearest integer, as every run, control, tune and
    report logs and reads it."""
    return int(round(amount))


def marks(amount: float, points: int) -> list[int]:
    """The metric steps of the ``points`` evaluation points up to ``amount``."""
    return [mark_of(point) for point in evaluation_points(amount, points)]
