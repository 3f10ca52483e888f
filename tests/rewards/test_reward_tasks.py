"""Contract tests shared by the reward tasks: registry, answer extraction, loaders, totality."""
import sys
import time
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards import TASKS, get_task, last_answer
from rewards.data import is_heldout, load_examples, read_records, sample
from conftest import write_records

REAL_TASKS = ("countdown", "gsm8k", "math500", "sudoku4")
EXAMPLES = {
    "countdown": {"numbers": [44, 19, 35], "target": 98},
    "gsm8k": {"question": "?", "answer": "She sold 48 + 24 = <<48+24=72>>72 clips.\n#### 72"},
    "math500": {"problem": "?", "answer": r"\frac{14}{3}"},
    "sudoku4": {"puzzle": "1430324141200310", "solution": "1432324141232314"},
}
CORRECT = {
    "countdown": "<answer>44 + 19 + 35</answer>",
    "gsm8k": "<answer>72</answer>",
    "math500": r"<answer>\boxed{\dfrac{14}{3}}</answer>",
    "sudoku4": "<answer>1432324141232314</answer>",
}
N = 1_000_000
ADVERSARIAL = [
    "",
    "\x00\xff\ufffd" * 1000,
    "<answer>",
    "</answer><answer>",
    "<answer>" * (N // 8),
    "</answer>" * (N // 9),
    "<answer>" + "(" * N + "</answer>",
    "<answer>" + "9" * N + "</answer>",
    "<answer>9**9**9</answer>",
    "<answer>" + "9" * 4000 + "**9</answer>",
    "\\boxed{" * (N // 7),
    "<answer>\\boxed{" + "{" * N + "</answer>",
    "<answer>" + "1," * N + "</answer>",
    "<answer>" + "-" * N + "1</answer>",
    "<answer>" + "\\frac{" * 160 + "</answer>",
    "<answer>\\text{" + " " * 990 + "</answer>",
    "<answer>1e999999999</answer>",
    "<answer>" + "<answer>1</answer>" * (N // 17) + "</answer>",
    "<answer>٣٤</answer>",
    "<answer>\U0001f600 ² ½ 𝟙</answer>",
]

answers = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="0123456789+-*/()=., {}\\$%<>/answerboxdfrac", max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
)
completions = st.lists(
    st.one_of(answers, st.sampled_from(["<answer>", "</answer>", "\\boxed{", "}", "####", "\n"])), max_size=12
).map("".join)


def test_unknown_task_lists_known_names():
    with pytest.raises(KeyError) as info:
        get_task("nope")
    for name in ("arithmetic", *REAL_TASKS):
        assert name in str(info.value)


@pytest.mark.parametrize("name", REAL_TASKS)
def test_registered_tasks_keep_the_contract(name):
    task = get_task(name)
    assert task.name == name and name in TASKS.factories
    assert task.reward_range == (0.0, 1.0)
    assert task.reward(CORRECT[name], EXAMPLES[name]) == 1.0
    assert task.reward("no answer here", EXAMPLES[name]) == 0.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", None),
        ("<answer>5</answer>", "5"),
        ("<answer>\nline one\nline two\n</answer>", "\nline one\nline two\n"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),
        ("<answer>1</answer> then <answer>2", "1"),
        ("<answer>outer <answer>inner</answer>", "inner"),
        ("<answer>1</answer>2</answer>", "1"),
        ("</answer><answer>", None),
        ("<answer></answer>", ""),
    ],
)
def test_last_answer(text, expected):
    assert last_answer(text) == expected


@pytest.mark.parametrize("name", REAL_TASKS)
@settings(max_examples=200, deadline=1000)
@given(completion=completions)
def test_reward_is_total_and_in_range(name, completion):
    task = get_task(name)
    low, high = task.reward_range
    assert low <= task.reward(completion, EXAMPLES[name]) <= high


@pytest.mark.parametrize("name", REAL_TASKS)
def test_adversarial_inputs_are_scored_fast(name):
    task = get_task(name)
    for completion in ADVERSARIAL + [None, b"<answer>1</answer>"]:
        start = time.perf_counter()
        reward = task.reward(completion, EXAMPLES[name])
        assert 0.0 <= reward <= 1.0
        assert time.perf_counter() - start < 2.0, repr(completion[:40])


class ChatTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return f"<|user|>{messages[0]['content']}<|assistant|>"


@pytest.mark.parametrize("name", REAL_TASKS)
def test_prompts_ask_for_an_answer_tag(name):
    task = get_task(name)
    plain = task.prompt(EXAMPLES[name])
    assert "<answer></answer>" in plain and not plain.startswith("<|user|>")
    assert task.prompt(EXAMPLES[name], tokenizer=ChatTokenizer()) == f"<|user|>{plain}<|assistant|>"


ROWS = [{"question": f"q{i}", "answer": f"#### {i}", "nums": [1, 2, i]} for i in range(50)]


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_read_records_gives_plain_python_values(tmp_path, suffix):
    records = read_records(write_records(tmp_path, suffix, ROWS))
    assert records == ROWS


def test_read_records_keeps_csv_fields_as_strings(tmp_path):
    path = tmp_path / "grid.csv"
    path.write_text("Puzzle,Solution\n0120,3124\n")
    assert read_records(path) == [{"Puzzle": "0120", "Solution": "3124"}]


def test_read_records_rejects_unknown_files(tmp_path):
    with pytest.raises(ValueError, match="unknown file type"):
        read_records(tmp_path / "rows.txt")


def test_local_files_split_by_item_hash(tmp_path):
    path = write_records(tmp_path, ".jsonl", ROWS)
    split = {s: load_examples("t", s, str(path), dict, lambda r: r["question"]) for s in ("train", "heldout")}
    assert len(split["train"]) + len(split["heldout"]) == len(ROWS)
    assert all(is_heldout(r["question"]) for r in split["heldout"])
    assert not {r["question"] for r in split["train"]} & {r["question"] for r in split["heldout"]}


def test_bad_records_name_the_source(tmp_path):
    path = write_records(tmp_path, ".jsonl", [{"question": "q"}])
    with pytest.raises(ValueError, match="record 0 of .*rows.jsonl"):
        load_examples("t", "train", str(path), lambda r: {"a": r["answer"]}, str)


def test_sample_is_deterministic_and_bounded():
    items = [{"i": i} for i in range(30)]
    assert sample(items, None, 0, "train") is items
    assert sample(items, 10, 3, "train") == sample(items, 10, 3, "train") != sample(items, 10, 4, "train")
    assert len(sample(items, 100, 0, "train")) == 30


@pytest.mark.parametrize("name", ["gsm8k", "math500"])
def test_hub_without_datasets_package_names_the_source(monkeypatch, name):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(RuntimeError, match=r"needs the optional 'datasets' package.*source="):
        get_task(name).examples("train")


def test_hub_offline_names_the_dataset(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(RuntimeError, match="openai/gsm8k.*no network"):
        get_task("gsm8k").examples("heldout")


def test_hub_maps_and_divides_splits(monkeypatch):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return [{"question": f"{split} {i}", "answer": "#### 1", "problem": f"p{i}", "level": 3} for i in range(40)]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert len(get_task("gsm8k").examples("heldout")) == 40  # gsm8k's own test split, whole
    math_train = get_task("math500").examples("train", source="hub:someone/math")
    assert 0 < len(math_train) < 40 and math_train[0]["difficulty"] == 3  # one split, divided
    assert calls == [("openai/gsm8k", "main", "test"), ("someone/math", None, "test")]
