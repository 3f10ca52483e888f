import pytest
"""methods.base.all_reduce_sums: named scalars across gloo ranks, sums and maxima in one collective,
and ranks that disagree on the names fail loudly instead of mixing values up."""
import json
import pathlib

import torch.multiprocessing as mp

from conftest import gloo_rank
from methods.base import all_reduce_sums


def _rank(rank: int, world: int, directory: str) -> None:
    with gloo_rank(f"{directory}/store", rank, world, seconds=60):
        # names in a different order on each rank: pairing is by name, not by position
        names = ["units", "loss", "ratio_max"] if rank == 0 else ["ratio_max", "units", "loss"]
        values = {"units": [3.0, 4.0][rank], "loss": [0.25, -1.5][rank], "ratio_max": [1.5, 1.25][rank]}
        result = {"reduced": all_reduce_sums({n: values[n] for n in names}, max_keys=("ratio_max",))}
        try:
            all_reduce_sums({"units": 1.0, f"only_on_rank_{rank}": 2.0})
        except RuntimeError as error:
            result["mismatch"] = str(error)
        pathlib.Path(directory, f"rank-{rank}.json").write_text(json.dumps(result))


@pytest.mark.slow
def test_named_sums_and_maxima_across_two_ranks(tmp_path):
    mp.spawn(_rank, args=(2, str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert result["reduced"] == {"units": 7.0, "loss": -1.25, "ratio_max": 1.5}
        assert "different statistics" in result["mismatch"]


def test_one_process_returns_the_values():
    assert all_reduce_sums({"b": 2, "a": 0.5}, max_keys=("a",)) == {"a": 0.5, "b": 2.0}
