"""The one validator: every problem of a config at once, each named by its path."""
import pytest

from arena.config import ConfigError, build
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
