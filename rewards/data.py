"""Task items from local files or the Hugging Face hub, with deterministic train / held-out splits.

``source`` names where a task's items come from:

- a local file: ``.jsonl`` (one JSON object a line), ``.json`` (a list of objects), ``.parquet`` or
  ``.csv``, with the public dataset's fields;
- ``"hub"`` for the task's public dataset, or ``"hub:owner/name"`` for another with the same fields,
  loaded through the optional ``datasets`` package (``pip install 'arena[data]'``).

Items of one file, or of one hub split that serves both of our splits, are divided by a hash of the
item's text: held out when it falls in the held-out fifth. The division depends on the item alone,
never on the seed or the file order, so train and held-out never share an item.
"""
from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from arena.rng import numpy_generator

SPLITS = ("train", "heldout")


def is_heldout(key: str) -> bool:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 5 == 0


def check_split(task: str, split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"{task}: unknown split {split!r}; expected one of {SPLITS}")


def generate_split(task: str, split: str, n: int, seed: int, levels: tuple, make: Callable,
                   distinct: bool = True, pool: Callable[[object], int | None] | None = None) -> list[dict]:
    """``n`` generated items balanced over difficulty ``levels``, on ``split``'s side of the hash.

    ``make(rng, level)`` returns an item with a ``"key"`` entry (its identity, removed here) or None;
    item i draws from a generator keyed by (seed, split, level, i). ``distinct`` items never repeat a key.
    ``pool(level)`` is the number of distinct keys of a level on this split (None: more than any draw needs):
    a level whose pool is used up passes its turn to the next level that has items left (balanced while the
    pools last), and asking for more items than all the pools hold is a ValueError that says how many there are.
    """
    check_split(task, split)
    items, seen = [], set()
    left = {level: None if pool is None else pool(level) for level in levels} if distinct else {}
    if distinct and all(count is not None for count in left.values()) and n > sum(left.values()):
        raise ValueError(f"{task}: the {split} split of levels {list(levels)} holds {sum(left.values())} distinct "
                         f"items ({', '.join(f'level {k}: {v}' for k, v in left.items())}); {n} were asked for")
    turn = 0
    for i in range(n):
        while distinct and left[levels[turn % len(levels)]] == 0:
            turn += 1
        level = levels[turn % len(levels)]
        turn += 1
        rng = numpy_generator(seed, SPLITS.index(split), level, i)
        while True:
            item = make(rng, level)
            if item and item["key"] not in seen and is_heldout(item["key"]) == (split == "heldout"):
                break
        if distinct:
            seen.add(item["key"])
            if left[level] is not None:
                left[level] -= 1
        del item["key"]
        items.append(item)
    return items


@dataclass(frozen=True)
class Hub:
    """A public dataset: our split -> its split. A hub split serving both of ours is divided by hash."""

    dataset: str
    splits: dict[str, str]
    config: str | None = None


def _plain(value):
    # parquet gives numpy arrays and scalars; the tasks want lists and Python numbers
    return value.tolist() if hasattr(value, "tolist") else value


def read_records(path: str | Path) -> list[dict]:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    if suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if suffix == ".csv":
        # the csv module keeps every field a string: pandas would read "0120..." as a number
        with path.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    if suffix == ".parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]
    raise ValueError(f"{path}: unknown file type {suffix!r}; expected .jsonl, .json, .parquet or .csv")


def hub_records(task: str, dataset: str, split: str, config: str | None = None) -> list[dict]:
    """Rows of a hub dataset split; a clear error naming the dataset when that is impossible."""
    hint = "or pass source=<local .jsonl/.parquet file with the same fields>"
    try:
        import datasets
    except ImportError as err:
        raise RuntimeError(
            f"{task}: loading {dataset!r} from the hub needs the optional 'datasets' package "
            f"(pip install 'arena[data]'); {hint}"
        ) from err
    try:
        rows = datasets.load_dataset(dataset, config, split=split)
    except Exception as err:  # offline, unknown dataset, gated...: all end the same way
        raise RuntimeError(f"{task}: could not load {dataset!r} split {split!r} from the hub ({err}); {hint}") from err
    return [{k: _plain(v) for k, v in dict(row).items()} for row in rows]


def load_examples(
    task: str,
    split: str,
    source: str,
    make: Callable[[dict], dict],
    key: Callable[[dict], str],
    hub: Hub | None = None,
) -> list[dict]:
    """Items of ``split`` from ``source``, each record turned into an example by ``make``."""
    check_split(task, split)
    if source == "hub" or source.startswith("hub:"):
        if hub is None:
            raise ValueError(f"{task}: no hub dataset; pass source=<local file>")
        dataset = hub.dataset if source == "hub" else source[len("hub:") :]
        records = hub_records(task, dataset, hub.splits[split], hub.config)
        divide = list(hub.splits.values()).count(hub.splits[split]) > 1
    else:
        records, divide = read_records(source), True
    items = []
    for i, record in enumerate(records):
        try:
            items.append(make(record))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{task}: record {i} of {source!r} is not a valid item: {err!r}") from err
    if divide:
        items = [item for item in items if is_heldout(key(item)) == (split == "heldout")]
    return items


def sample(items: list[dict], n: int | None, seed: int, split: str) -> list[dict]:
    """All items in order when ``n`` is None, else at most ``n`` drawn without replacement from ``seed``."""
    if n is None:
        return items
    order = numpy_generator(seed, SPLITS.index(split)).permutation(len(items))
    return [items[i] for i in order[:n]]
