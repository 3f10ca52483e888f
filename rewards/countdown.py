"""Countdown: combine 3 or 4 given numbers with + - * / and parentheses to reach a target.

Example fields: ``numbers`` (list of int), ``target`` (int), ``difficulty`` (how many numbers);
generated items also carry ``solution``, the expression they were built from.

Answer format: the expression alone in the last ``<answer>...</answer>``, e.g.
``<answer>(44 - 19) * 4</answer>``; a trailing ``= <target>`` is allowed.

Reward (d1's ``compute_score``):
- 1.0 when the expression uses exactly the given multiset of numbers, each as written, and evaluates
  within 1e-5 of the target;
- 0.1, d1's format credit, when an answer is present but invalid or wrong;
- 0.0 without a complete ``<answer>...</answer>``.

The expression is evaluated by a small recursive-descent parser over exact fractions: integers,
binary + - * /, unary minus and parentheses, nothing else (no ``**``, no names, no decimals), at
most 100 characters. Python's ``eval`` is never used.

Differences from d1: d1 runs ``eval`` after a character check, so ``99**99**99`` hangs the reward
and ``3.0`` reads as the numbers 3 and 0; here both are invalid (0.1). We accept ``×``, ``÷`` and
``−`` for * / -, and a trailing ``= <target>``, which d1 scores 0.1. The innermost answer counts
when tags nest (see ``last_answer``).

Data: generated from the seed (default; every item solvable by construction), or
``source=<file>`` / ``"hub"`` in the public Countdown format (``nums``, ``target``;
``Jiayi-Pan/Countdown-Tasks-3to4``, a single train split), divided train / held-out by item hash.
d1 uses 3-number items only and holds out the last 500.
"""
from __future__ import annotations

import re
from fractions import Fraction

from rewards.base import Task, chat_prompt, last_answer
from rewards.data import Hub, generate_split, load_examples, sample
from rewards.parsing import clip

LEVELS = (3, 4)
MAX_EXPRESSION = 100
MAX_TARGET = 999
FORMAT_CREDIT = 0.1
HUB = Hub("Jiayi-Pan/Countdown-Tasks-3to4", {"train": "train", "heldout": "train"})

ALLOWED_RE = re.compile(r"[0-9\s()*/+-]*")
TOKEN_RE = re.compile(r"[0-9]+|[()*/+-]")
UNICODE_OPS = str.maketrans({"×": "*", "÷": "/", "−": "-"})
TOLERANCE = Fraction(1, 100_000)


class _Parser:
    """expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*; unary := '-'* atom;
    atom := integer | '(' expr ')'. Raises ValueError on anything else."""

    def __init__(self, text: str):
        if not ALLOWED_RE.fullmatch(text):
            raise ValueError("only integers, + - * / and parentheses are allowed")
        self.tokens, self.pos, self.numbers = TOKEN_RE.findall(text), 0, []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("unexpected end")
        self.pos += 1
        return token

    def parse(self) -> Fraction:
        value = self.expr()
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()!r}")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            value += sign * self.term()
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value *= self.unary()
            else:
                divisor = self.unary()
                if divisor == 0:
                    raise ValueError("division by zero")
                value /= divisor
        return value

    def unary(self) -> Fraction:
        sign = 1
        while self.peek() == "-":  # a loop, not recursion: "------5" cannot exhaust the stack
            self.take()
            sign = -sign
        return sign * self.atom()

    def atom(self) -> Fraction:
        token = self.take()
        if token == "(":
            value = self.expr()
            if self.take() != ")":
                raise ValueError("unbalanced parenthesis")
            return value
        if not token.isdigit():  # tokens are ASCII digits or operators
            raise ValueError(f"unexpected {token!r}")
        self.numbers.append(int(token))
        return Fraction(int(token))


def evaluate(expression: str) -> tuple[Fraction, list[int]]:
    """Exact value of an arithmetic expression and the numbers it uses; ValueError if invalid."""
    if len(expression) > MAX_EXPRESSION:
        raise ValueError("expression too long")
    parser = _Parser(expression)
    return parser.parse(), parser.numbers


def _score(answer: str, numbers: list[int], target: int) -> float:
    expression, *stated = answer.translate(UNICODE_OPS).split("=")
    if stated and (len(stated) > 1 or stated[0].strip() != str(target)):
        return FORMAT_CREDIT
    try:
        value, used = evaluate(expression)
    except ValueError:
        return FORMAT_CREDIT
    correct = sorted(used) == sorted(numbers) and abs(value - target) < TOLERANCE
    return 1.0 if correct else FORMAT_CREDIT


def _build(rng, count: int) -> tuple[list[int], int, str] | None:
    """Numbers and a target reached by merging random pairs with random operations, as in the game:
    every intermediate value a positive integer. None when the target leaves 1..MAX_TARGET."""
    numbers = [int(x) for x in rng.integers(1, 100, size=count)]
    terms = [(n, str(n)) for n in numbers]
    while len(terms) > 1:
        i, j = (int(k) for k in rng.choice(len(terms), size=2, replace=False))
        (a, a_text), (b, b_text) = terms[i], terms[j]
        if a < b:  # subtraction and division go from the larger value
            (a, a_text), (b, b_text) = (b, b_text), (a, a_text)
        options = [(a + b, "+"), (a * b, "*")]
        options += [(a - b, "-")] if a > b else []
        options += [(a // b, "/")] if a % b == 0 else []
        value, op = options[int(rng.integers(len(options)))]
        terms = [t for k, t in enumerate(terms) if k not in (i, j)] + [(value, f"({a_text} {op} {b_text})")]
    target, solution = terms[0]
    return (numbers, target, solution[1:-1]) if 1 <= target <= MAX_TARGET else None


def _from_record(record: dict) -> dict:
    numbers = [int(n) for n in record.get("numbers", record.get("nums"))]
    return {"numbers": numbers, "target": int(record["target"]), "difficulty": len(numbers)}


def _make(rng, count: int) -> dict | None:
    built = _build(rng, count)
    if built is None:
        return None
    item = {"numbers": built[0], "target": built[1], "difficulty": count, "solution": built[2]}
    return {**item, "key": _key(item)}


def _key(example: dict) -> str:
    return f"{sorted(example['numbers'])}->{example['target']}"


class CountdownTask(Task):
    name = "countdown"
    reward_range = (0.0, 1.0)

    def reward(self, completion: str, example: dict) -> float:
        answer = last_answer(clip(completion))
        return 0.0 if answer is None else _score(answer, example["numbers"], example["target"])

    def prompt(self, example: dict, tokenizer=None) -> str:
        numbers = ", ".join(str(n) for n in example["numbers"])
        text = (
            f"Using the numbers {numbers}, write an equation that equals {example['target']}. "
            "Use each number exactly once, with + - * / and parentheses. Think step by step, then "
            "give only the expression inside <answer></answer>, for example <answer>(1 + 2) * 3</answer>."
        )
        return chat_prompt(text, tokenizer)

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        """Generated items (default ``n`` = 64 per level, balanced, distinct), or items from ``source``."""
        if source is not None:
            return sample(load_examples(self.name, split, source, _from_record, _key, HUB), n, seed, split)
        return generate_split(self.name, split, 64 * len(LEVELS) if n is None else n, seed, LEVELS, _make)
