"""MATH-500: competition problems with a LaTeX final answer.

Example fields: ``problem``; ``answer``, a LaTeX string (a full solution's last ``\\boxed{}`` is
used when it has one); ``difficulty``, the dataset's ``level`` (1-5) when present.

Answer format: ``<answer>\\boxed{...}</answer>``. The final answer is the last ``\\boxed{}`` (nested
braces allowed) inside the last ``<answer>``; an ``<answer>`` without ``\\boxed{}`` counts as a whole;
without an ``<answer>``, the completion's last ``\\boxed{}`` counts (instruction-tuned models box
by habit, and the box is an unambiguous commitment). See ``parsing.final_answer``.

Reward: 1.0 when the final answer equals the reference after normalisation, else 0.0. Both sides
are normalised the same way: ``\\dfrac``/``\\tfrac`` -> ``\\frac``, ``\\frac12`` -> ``\\frac{1}{2}``,
``\\sqrt2`` -> ``\\sqrt{2}``; ``\\left``/``\\right``, spacing commands, whitespace, ``$``, ``%``,
degrees (``^\\circ``, ``°``), ``\\displaystyle`` and a trailing period dropped; ``\\text{...}``
unwrapped, with a trailing units word (``5\\text{ cm}``) dropped; a short left side ``x=`` dropped;
``.5`` -> ``0.5``; thousands commas in a lone number removed. Then plain numbers, ``a/b`` and
``\\frac{a}{b}`` compare by exact value, so ``0.5 == \\frac{1}{2} == 1/2``. No symbolic algebra:
``2\\sqrt{2}`` and ``\\sqrt{8}`` differ.

Differences from d1 (reward 2.0 for ``is_equiv`` plus a format term): d1's format term tests
``"\\boxed" in r`` with a non-raw string, where ``\\b`` is a backspace, so it never fires; here
there is no format term at all, only correctness on a 0-1 scale. ``\\left``/``\\right`` are removed
only as whole commands, so ``\\rightarrow`` survives (a plain ``replace`` would corrupt it).

Data: ``HuggingFaceH4/MATH-500`` (fields ``problem``, ``answer``, ``level``) through ``datasets``
(default ``source="hub"``), or a local JSONL/parquet file with those fields. MATH-500 has a single
``test`` split, divided train / held-out by item hash; training on its train part makes held-out
scores incomparable to published MATH500 numbers, so pass a training file as ``source`` for that.
"""
from __future__ import annotations

import re

from rewards.base import Task, chat_prompt
from rewards.data import Hub, load_examples, sample
from rewards.parsing import MAX_ANSWER, final_answer, last_boxed, to_fraction

HUB = Hub("HuggingFaceH4/MATH-500", {"train": "test", "heldout": "test"})

UNITS_RE = re.compile(r"(?<=\S)\s*\\(?:text|mbox|mathrm)\{[a-zA-Z ]+\}$")
TEXT_RE = re.compile(r"\\(?:text|textrm|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
DROP_RE = re.compile(
    r"\\(?:left|right|displaystyle|q?quad)(?![a-zA-Z])"  # sizing and spacing commands
    r"|\\[,;:! ]|\s+"  # thin spaces and whitespace
    r"|\^\s*\{?\s*\\circ\s*\}?|°"  # degrees
    r"|\\?[$%]"  # dollars and percent
)
FRAC_DIGITS_RE = re.compile(r"\\frac(\d)(\d)")
FRAC_LEFT_RE = re.compile(r"\\frac(\d)\{")
FRAC_RIGHT_RE = re.compile(r"\\frac\{([^{}]*)\}(\d)")
SQRT_RE = re.compile(r"\\sqrt(\w)")
LEADING_POINT_RE = re.compile(r"(?<!\d)\.(\d)")
GROUPED_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
FRAC_RE = re.compile(r"(-?)\\frac\{(\d+)\}\{(\d+)\}")


def normalize(answer: str) -> str:
    s = UNITS_RE.sub("", answer.strip())
    s = TEXT_RE.sub(r"\1", s)
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s).replace("{,}", ",")
    s = DROP_RE.sub("", s).rstrip(".")
    lhs, equals, rhs = s.partition("=")
    if equals and len(lhs) <= 2 and "=" not in rhs:  # "x=5" -> "5"
        s = rhs
    s = FRAC_DIGITS_RE.sub(r"\\frac{\1}{\2}", s)
    s = FRAC_LEFT_RE.sub(r"\\frac{\1}{", s)
    s = FRAC_RIGHT_RE.sub(r"\\frac{\1}{\2}", s)
    s = SQRT_RE.sub(r"\\sqrt{\1}", s)
    s = LEADING_POINT_RE.sub(r"0.\1", s)
    return s.replace(",", "") if GROUPED_RE.fullmatch(s) else s


def _value(normalized: str):
    """Exact value of a normalised number, ``a/b`` or ``\\frac{a}{b}``; None for anything else."""
    frac = FRAC_RE.fullmatch(normalized)
    return to_fraction(f"{frac[1]}{frac[2]}/{frac[3]}" if frac else normalized)


def equivalent(answer: str, reference: str) -> bool:
    a, b = normalize(answer), normalize(reference)
    if not a:
        return False
    value = _value(a)
    return a == b or (value is not None and value == _value(b))


def reference(answer: str) -> str:
    answer = str(answer)
    boxed = last_boxed(answer)
    return answer if boxed is None else boxed


def _from_record(record: dict) -> dict:
    level = record.get("level")
    return {
        "problem": str(record["problem"]),
        "answer": reference(record["answer"]),
        "difficulty": None if level is None else int(str(level).removeprefix("Level ")),
    }


class Math500Task(Task):
    name = "math500"
    reward_range = (0.0, 1.0)

    def reward(self, completion: str, example: dict) -> float:
        answer = final_answer(completion)
        if answer is None or len(answer) > MAX_ANSWER:
            return 0.0
        return 1.0 if equivalent(answer, reference(example["answer"])) else 0.0

    def prompt(self, example: dict, tokenizer=None) -> str:
        text = (
            f"{example['problem']}\n"
            "Solve the problem step by step, then give the final answer as \\boxed{...} inside "
            "<answer></answer>."
        )
        return chat_prompt(text, tokenizer)

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        """Items of ``split`` from the hub (the default) or a local file; at most ``n``, drawn from ``seed``."""
        items = load_examples(self.name, split, source or "hub", _from_record, lambda x: x["problem"], HUB)
        return sample(items, n, seed, split)
