"""The one validator: every problem of a config at once, each named by its path, all the way down."""
from dataclasses import dataclass, field

import pytest

from arena.config import CONVERT, REQUIRED, Checked, ConfigError, build, import_path
from methods import get_method
from methods.likelihood import ESTIMATORS, ScoringBatch, estimate


def problems_of(method: str, options: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        build(get_method(method).Config, options, where=f"optimizer[{method}]")
    return [str(p) for p in caught.value.problems]


def test_three_wrong_options_give_three_errors_in_one_message():
    found = problems_of("es", {"sigma": -1, "population": 3, "shaping": "ranks"})
    assert sorted(found) == [
        "optimizer[es].population: must be >= 2 (and even when antithetic), got 3",
        "optimizer[es].shaping: must be one of 'centered_rank', 'zscore', got 'ranks'",
        "optimizer[es].sigma: must be > 0, got -1",
    ]
    with pytest.raises(ConfigError) as caught:
        build(get_method("es").Config, {"sigma": -1, "population": 3, "shaping": "ranks"}, where="optimizer[es]")
    assert str(caught.value).count("\n") == 2  # one message, one line per problem


def test_unknown_keys_suggest_a_close_match_and_types_are_named():
    found = problems_of("grpo", {"learning_rate": 1e-4, "grup_size": 4, "lr": "fast", "advantage": 3})
    assert "optimizer[grpo].learning_rate: unknown option; known: " in found[0]
    assert found[1] == "optimizer[grpo].grup_size: unknown option; did you mean 'group_size'?"
    assert "optimizer[grpo].lr: expected a number, got 'fast'" in found
    assert "optimizer[grpo].advantage: must be one of 'mean', 'zscore', got 3" in found


def test_a_subclass_and_its_parent_report_together():
    """block_grpo's own (estimator) problems and GRPO's problems, neither hiding the other."""
    found = problems_of("block_grpo", {"lr": -1, "group_size": 1, "draws": 3, "antithetic": True})
    assert sorted(found) == [
        "optimizer[block_grpo].draws: antithetic draws come in pairs: must be even, got 3",
        "optimizer[block_grpo].group_size: must be >= 2, got 1",
        "optimizer[block_grpo].lr: must be >= 0, got -1",
    ]
    assert problems_of("diffu_grpo", {"p_mask": 1.5, "sharding": "fsdp", "trainable": "lora"}) == [
        "optimizer[diffu_grpo].sharding: 'fsdp' shards full fine-tuning; LoRA runs replicate the model (sharding: none)",
        "optimizer[diffu_grpo].p_mask: must be in [0, 1), got 1.5",
    ]


def test_direct_construction_checks_ranges_too():
    with pytest.raises(ConfigError, match="sigma: must be > 0"):
        get_method("es").Config(sigma=0)


def test_estimator_options_have_one_default_and_one_check():
    """block_grpo's defaults are the estimator table's; the estimator itself refuses bad options."""
    config = get_method("block_grpo").Config()
    assert config.estimator_options() == {"draws": ESTIMATORS["elbo"].options().draws, "form": "count",
                                          "antithetic": False}
    batch = ScoringBatch.build([[1, 2]], [[3, 4]], pad_id=0, block_size=4)
    with pytest.raises(ConfigError, match=r"estimator\[elbo\]\.draws: antithetic draws come in pairs"):
        estimate("elbo", None, batch, (0, 0, 0), draws=3, antithetic=True)
    with pytest.raises(ConfigError, match=r"estimator\[masked\]\.nodes: unknown option"):
        estimate("masked", None, batch, (0, 0, 0), nodes=2)


# ---------------------------------------------------------------------------------------------
# all the way down: nested configs, named entries, converters, required options


@dataclass(frozen=True)
class Leaf(Checked):
    size: int = 1

    def problems(self):
        if self.size < 1:
            yield "size", f"must be >= 1, got {self.size!r}"


def counts(value):
    if type(value) is int and value >= 1:
        return tuple(range(value))
    if isinstance(value, list):
        return tuple(value)
    raise ValueError(f"expected a count >= 1 or a list, got {value!r}")


@dataclass(frozen=True)
class Tree(Checked):
    leaf: Leaf = field(default_factory=Leaf)
    leaves: dict[str, Leaf] = field(default_factory=dict, metadata={REQUIRED: "a mapping of name -> leaf"})
    seeds: tuple[int, ...] = field(default=(0,), metadata={CONVERT: counts})
    label: str = "tree"

    def problems(self):
        if not self.leaves:
            yield "leaves", "must hold at least one leaf"
        if self.label == "tree" and len(self.leaves) > 2:
            yield "label", "a tree of more than two leaves needs a label"


def test_nested_configs_named_entries_and_converters_are_built_with_every_problem_at_its_path():
    tree = build(Tree, {"leaf": {"size": 2}, "leaves": {"a": {}, 7: {"size": 3}}, "seeds": 2})
    assert tree == Tree(Leaf(2), {"a": Leaf(1), "7": Leaf(3)}, (0, 1))
    with pytest.raises(ConfigError) as caught:
        build(Tree, {"leaf": {"size": 0, "colour": 1}, "leaves": {"a": {"size": "big"}, "b": 5, "c": {}, "d": {}},
                     "seeds": 0, "labl": "x"}, where="tree")
    assert [str(p) for p in caught.value.problems] == [
        "tree.labl: unknown option; did you mean 'label'?",
        "tree.leaf.colour: unknown option; known: size",
        "tree.leaf.size: must be >= 1, got 0",
        "tree.leaves.a.size: expected an integer, got 'big'",
        "tree.leaves.b: expected a mapping of options, got 5",
        "tree.seeds: expected a count >= 1 or a list, got 0",
    ]  # c and d built, so the tree's own checks ran on them (two leaves: no label needed)


@dataclass(frozen=True)
class Forest(Checked):
    trees: dict[str, dict[str, Leaf]] = field(default_factory=dict)

    def problems(self):
        for name, leaves in self.trees.items():
            if not leaves:
                yield f"trees.{name}", "must hold at least one leaf"


def test_nested_mappings_of_configs_are_built_entry_by_entry_and_the_parent_judges_what_built():
    """A failed leaf is left out and its siblings kept; the parent's check of an entry that lost leaves to
    problems is dropped (it would judge a stand-in), while its check of an entry written empty stays."""
    with pytest.raises(ConfigError) as caught:
        build(Forest, {"trees": {"oak": {"a": {"size": 0}, "b": {}}, "elm": 3, "ash": {"c": 4}, "fir": {}}})
    assert [str(p) for p in caught.value.problems] == [
        "trees.oak.a.size: must be >= 1, got 0",
        "trees.elm: expected a mapping of names to Leaf options, got 3",
        "trees.ash.c: expected a mapping of options, got 4",
        "trees.fir: must hold at least one leaf",
    ]
    built = build(Forest, {"trees": {"oak": {"a": {"size": 2}, "b": {}}}})
    assert built == Forest({"oak": {"a": Leaf(2), "b": Leaf(1)}})


def test_a_parents_check_of_an_option_that_failed_or_is_missing_is_dropped():
    """The parent judged the default that stood in: 'must hold at least one leaf' would be false."""
    with pytest.raises(ConfigError) as caught:
        build(Tree, {"leaves": {"a": {"size": 0}}})
    assert [str(p) for p in caught.value.problems] == ["leaves.a.size: must be >= 1, got 0"]
    with pytest.raises(ConfigError) as caught:
        build(Tree, {})
    assert [str(p) for p in caught.value.problems] == ["leaves: required: a mapping of name -> leaf"]
    with pytest.raises(ConfigError) as caught:
        build(Tree, {"leaves": [1]})
    assert [str(p) for p in caught.value.problems] == ["leaves: expected a mapping of name -> leaf, got [1]"]


def test_nulls_are_defaults_at_a_files_top_level_only_and_fixed_values_are_no_options():
    tree = build(Tree, {"leaves": {"a": {}}, "label": None, "seeds": None}, nulls_are_defaults=True)
    assert tree.label == "tree" and tree.seeds == (0,)
    with pytest.raises(ConfigError, match=r"^leaf\.size: expected an integer, got None$"):
        build(Tree, {"leaves": {"a": {}}, "leaf": {"size": None}}, nulls_are_defaults=True)
    assert build(Tree, {"leaves": {"a": {}}}, fixed={"label": "given"}).label == "given"
    with pytest.raises(ConfigError, match=r"^label: unknown option; known: leaf, leaves, seeds$"):
        build(Tree, {"leaves": {"a": {}}, "label": "mine"}, fixed={"label": "given"})


def test_an_import_path_that_does_not_import_names_why():
    assert import_path("arena.config:build", "method") is build
    with pytest.raises(ConfigError, match=r"^method: cannot import 'arena.config:nothing': AttributeError: "):
        import_path("arena.config:nothing", "method")
