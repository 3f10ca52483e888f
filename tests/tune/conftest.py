import pytest
import torch
import yaml

from tune_support import STUDY


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model is fastest on one thread, far more so on a loaded machine
    yield tmp_path
    torch.set_num_threads(threads)
