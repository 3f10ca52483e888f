"""The task contract shared by every reward task.

A task is data plus pure functions: it makes prompts from examples, scores completions, and yields
deterministic train / held-out splits. Rewards never raise and never leave their documented range.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

OPEN, CLOSE = "<answer>", "</answer>"


class Task:
    """The base of every task: the required members raise until a task defines them; the optional ones have
    their defaults here, so that callers use them directly instead of probing for them."""

    reward_range: tuple[float, float] = (0.0, 1.0)  # every reward lies in it; (0, 1) with 0/1 rewards adds pass@k
    levels: tuple[int, ...] | None = None  # the difficulty levels its examples carry, if it has any

    @property
    def name(self) -> str:
        """Shown in error messages: a task sets its own (``name = "arithmetic"``); the class's name otherwise."""
        return type(self).__name__

    def reward(self, completion: str, example: dict) -> float:
        raise NotImplementedError(f"{type(self).__name__} defines no reward(completion, example)")

    def prompt(self, example: dict, tokenizer: Any = None) -> str:
        raise NotImplementedError(f"{type(self).__name__} defines no prompt(example, tokenizer)")

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        raise NotImplementedError(f"{type(self).__name__} defines no examples(split, n, seed, source)")
    # An evaluation's prompts must be distinct: a task whose draws may repeat an item takes a keyword
    # ``distinct: bool = False`` as well, and the evaluation asks for ``distinct=True``.

    def sample_metrics(self, completion: str, example: dict) -> dict[str, float]:
        """Per-sample metrics besides the reward, each averaged over an evaluation's samples (none by default)."""
        return {}

    def teacher_answer(self, example: dict, rng) -> str:
        """The answer the embedded tiny model is pretrained on (``arena.model.tiny``): the example's own by
        default; a noisy teacher draws from ``rng`` (a numpy Generator) instead."""
        return example["answer"]


def last_answer(text: str) -> str | None:
    """Content of the last complete ``<answer>...</answer>`` pair (multi-line allowed), else None.

    The last opening tag before the last closing tag, up to its nearest closing tag: nested tags
    give the innermost answer. Found with ``rfind`` so the time is linear in the text, where a
    non-greedy regex is quadratic on many unclosed ``<answer>`` tags.
    """
    close = text.rfind(CLOSE)
    start = text.rfind(OPEN, 0, close) if close > 0 else -1
    if start < 0:
        return None
    start += len(OPEN)
    return text[start : text.find(CLOSE, start)]


def chat_prompt(text: str, tokenizer: Any = None) -> str:
    """``text`` as a single user turn in the tokenizer's chat template; plain text without one."""
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if not template:
        return text
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


@dataclass(frozen=True)
class Registry:
    """Name -> task factory, with an error that lists the known names."""

    factories: dict[str, Callable[[], Task]] = field(default_factory=dict)

    def add(self, name: str, factory: Callable[[], Task]) -> None:
        self.factories[name] = factory

    def get(self, name: str) -> Task:
        if name not in self.factories:
            known = ", ".join(sorted(self.factories))
            raise KeyError(f"unknown task {name!r}; known tasks: {known}")
        return self.factories[name]()
