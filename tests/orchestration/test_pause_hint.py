"""The hint that a pause may be stuck: only while a trial has not written its pause's checkpoint."""

import time
from types import SimpleNamespace

import pytest

from det_estimator.config import load_experiment_config
from det_estimator.lifecycle import RunLifecycle
from det_estimator.orchestration import _experiment
from det_estimator.store import ExperimentStore


class Messages:
    def __init__(self):
        self.shown = []

    def message(self, text):
        self.shown.append(text)


def pausing_loop(tmp_path, store, acknowledged):
    """An experiment loop whose one trial (on two slots) was asked to pause long ago."""
    config = load_experiment_config(
        {
            "entrypoint": "model_def:Trial",
            "hyperparameters": {"global_batch_size": 4},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 20}},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        }
    )
    experiment_id = store.create_experiment("pause", config.to_dict(), str(tmp_path), config.entrypoint, 2, False)
    trial_id = store.create_trial(experiment_id, {"global_batch_size": 4}, 5, tmp_path / "checkpoints")
    info = RunLifecycle(store).begin(experiment_id, trial_id, slots=2)
    if acknowledged:  # what the chief records once the pause's checkpoint is written
        store.acknowledge_preemption(info.require_trial().run_id)
    loop = object.__new__(_experiment._ExperimentLoop)
    loop._store = store
    loop._display = Messages()
    loop._running = {trial_id: SimpleNamespace(info=info, stopped=False)}
    loop._pausing_since = time.monotonic() - 2 * _experiment._STOP_AFTER_SECONDS
    loop._stop_hint_shown = False
    return loop


@pytest.mark.parametrize(("acknowledged", "hinted"), [(False, True), (True, False)])
def test_a_slow_pause_hints_at_a_stuck_process_only_before_its_checkpoint(tmp_path, acknowledged, hinted):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        loop = pausing_loop(tmp_path, store, acknowledged)
        loop._hint_at_stopping()
        assert any("a process may be stuck" in text for text in loop._display.shown) == hinted
