"""det.keras.init() started on several TF_CONFIG workers: refused, with what to do on this stack."""

import json

import pytest

import det_estimator as det
from det_estimator.errors import DetEstimatorError
from det_estimator.keras._api import _init

CLUSTER = {"worker": ["localhost:1", "localhost:2"]}
TWO_WORKERS = json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}})


@pytest.fixture
def on_two_tf_config_workers(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", TWO_WORKERS)
    monkeypatch.delenv("HOROVOD_SIZE", raising=False)


def test_without_horovod_it_says_the_new_api_needs_it_and_what_runs_here(on_two_tf_config_workers, monkeypatch):
    monkeypatch.setattr(_init, "has_horovod", lambda: False)
    with pytest.raises(DetEstimatorError, match="this stack has no Horovod") as raised:
        det.keras.init()
    assert "DeterminedCallback" in str(raised.value) and "from_tf_config" in str(raised.value)


def test_with_horovod_it_says_to_launch_under_horovodrun(on_two_tf_config_workers, monkeypatch):
    monkeypatch.setattr(_init, "has_horovod", lambda: True)
    with pytest.raises(DetEstimatorError, match="det_estimator.launch.horovod"):
        det.keras.init()
