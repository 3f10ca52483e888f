"""GSM8K: grade-school word problems with a numeric final answer.

Example fields: ``question``; ``answer``, the final number as a string or the dataset's full
solution ending ``#### N``; ``difficulty``, the number of solution lines before ``####`` (None for a
bare number).

Answer format: the final number in the last ``<answer>...</answer>``, e.g. ``<answer>18</answer>``;
``<answer>\\boxed{18}</answer>``, ``$1,234.50``, ``18 dollars`` and ``25%`` are read too. Without an
``<answer>``, the completion's last ``\\boxed{}`` is read instead (see ``parsing.final_answer``).

Reward: 1.0 when the last number of the answer equals the reference number exactly (as fractions:
``18 == 18.00 == $18``, ``1,234 == 1234``, ``−5 == -5``), else 0.0. Units, ``$`` and ``%`` are
ignored; thousands commas must be well placed (``1,2345`` reads as 2345).

Differences from d1, whose reward sums five terms up to 4.0: d1 gives 2.0 for exact *string*
equality with the ``####`` answer, so ``$18`` and ``18.00`` score as wrong, plus 2.0 of format
terms (digits only, two format regexes, tag counting) that pay for the shape of a wrong answer.
Here correctness alone is rewarded, on a 0-1 scale, comparing numbers rather than strings.

Data: ``openai/gsm8k`` (config ``main``; train -> train, test -> held-out) through ``datasets``
(default ``source="hub"``), or a local JSONL/parquet file with the fields ``question`` and
``answer``, divided train / held-out by item hash.
"""
from __future__ import annotations

from rewards.base import Task, chat_prompt
from rewards.data import Hub, load_examples, sample
from rewards.parsing import final_answer, last_number

HUB = Hub("openai/gsm8k", {"train": "train", "heldout": "test"}, config="main")


def reference(answer: str):
    """The reference number: after the last ``####`` of a full solution, or the bare number."""
    return last_number(str(answer).rsplit("####", 1)[-1])


def _from_record(record: dict) -> dict:
    answer = str(record["answer"])
    if reference(answer) is None:
        raise ValueError(f"no final number in answer {answer[-50:]!r}")
    solution, marker, _ = answer.rpartition("####")
    steps = sum(1 for line in solution.splitlines() if line.strip()) if marker else None
    return {"question": str(record["question"]), "answer": answer, "difficulty": steps}


class GSM8KTask(Task):
    name = "gsm8k"
    reward_range = (0.0, 1.0)

    def reward(self, completion: str, example: dict) -> float:
        answer = final_answer(completion)
        value = None if answer is None else last_number(answer)
        return 1.0 if value is not None and value == reference(example["answer"]) else 0.0

    def prompt(self, example: dict, tokenizer=None) -> str:
        text = (
            f"{example['question']}\n"
            "Solve the problem step by step, then give the final number inside <answer></answer>."
        )
        return chat_prompt(text, tokenizer)

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        """Items of ``split`` from the hub (the default) or a local file; at most ``n``, drawn from ``seed``."""
        items = load_examples(self.name, split, source or "hub", _from_record, lambda x: x["question"], HUB)
        return sample(items, n, seed, split)
