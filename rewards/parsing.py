"""Parsing shared by the math tasks: bounded input, the final answer, ``\\boxed{}`` and numbers.

Every function here is total on any string and runs in time linear in a bounded input.
"""
from __future__ import annotations

import re
from fractions import Fraction

from rewards.base import last_answer

# Far above any generation length; the answer sits at the end, so the tail is what is kept.
MAX_COMPLETION = 100_000
# Final answers longer than this are not answers; it bounds the normalisation work.
MAX_ANSWER = 1_000
# Longer digit strings are never a task's answer, and int() of huge strings is slow or refused.
MAX_DIGITS = 40

# Not after a letter, digit or point, so "1e72" or "3.14" give no extra number; "5-3" ends in 3.
NUMBER_RE = re.compile(r"(?<![A-Za-z0-9.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)")
# What to_fraction accepts: no exponents, which Fraction would expand in full.
EXACT_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def clip(completion) -> str:
    """The completion's tail as text; anything that is not a string reads as empty."""
    return completion[-MAX_COMPLETION:] if isinstance(completion, str) else ""


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed), or None if it is not closed."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = start + len("\\boxed")
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, min(len(text), i + MAX_ANSWER)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def final_answer(completion) -> str | None:
    """The answer a math completion commits to, or None.

    The last ``<answer>`` (its last ``\\boxed{}`` when it has one); without an ``<answer>``, the
    completion's last ``\\boxed{}``, since instruction-tuned models box their answers by habit.
    """
    text = clip(completion)
    answer = last_answer(text)
    if answer is None:
        return last_boxed(text)
    boxed = last_boxed(answer)
    return answer if boxed is None else boxed


def to_fraction(number: str) -> Fraction | None:
    """Exact value of ``-1,234.50`` or ``3/4`` (commas as thousands separators), else None."""
    number = number.strip().replace("−", "-")
    if len(number) > MAX_DIGITS or not EXACT_RE.fullmatch(number):
        return None
    try:
        return Fraction(number.replace(",", ""))
    except ZeroDivisionError:
        return None


def last_number(text: str) -> Fraction | None:
    """Value of the last number in ``text``; units, ``$`` and ``%`` around it are ignored."""
    numbers = NUMBER_RE.findall(text[-MAX_ANSWER:])
    return to_fraction(numbers[-1]) if numbers else None
