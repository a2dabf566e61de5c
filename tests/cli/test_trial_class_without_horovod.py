"""A trial class on several processes where Horovod is not installed.

A TFKerasTrial's worker runs under the TensorFlow launcher there (a
MultiWorkerMirroredStrategy; tests/launch/test_process_command.py, and
tests/distributed/test_metric_policy.py which runs one); an
EstimatorTrial runs only under Horovod, so it is refused before anything is recorded.
"""

import shutil
import sys
from pathlib import Path

import pytest

from det_estimator import launcher

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import run_command  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def without_horovod(monkeypatch):
    monkeypatch.setattr(launcher, "horovod_installed", lambda: False)


def test_the_estimator_trial_on_two_slots_is_refused_with_what_runs_instead(without_horovod, tmp_path):
    context = shutil.copytree(EXAMPLES / "ctr_binary", tmp_path / "ctr_binary")
    store = tmp_path / "new.sqlite"
    status, output = run_command(
        ["--store", str(store), "experiment", "create", str(context / "distributed.yaml"), str(context)]
    )
    assert status == 2, output
    assert "an EstimatorTrial on several processes (resources.slots_per_trial 2) runs under Horovod" in output
    assert "one slot" in output and "Traceback" not in output
    assert not store.exists() and not (tmp_path / "new-files").exists()
