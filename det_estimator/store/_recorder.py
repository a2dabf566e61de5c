"""StoreRecorder: the trial controller's progress, written to the store as it happens."""

import os
from pathlib import Path
from typing import Any

from det_estimator.store._event_files import MetricEventFiles
from det_estimator.store._store import ExperimentStore

# Checkpoint metadata the store does not repeat: large, and only for resuming.
_UNRECORDED_METADATA = ("rng_states", "config", "files")


class StoreRecorder:
    """A ``TrialObserver`` that records one trial's metrics and checkpoints in a store.

    It runs in the chief worker, which may be another process than the command, so it
    opens the store by path. Metrics also go to TensorBoard event files in the trial's
    ``tensorboard_dir``.

    Args:
        store_path: the store's database file.
        trial_id: the trial's id in that store.
    """

    def __init__(self, store_path: str, trial_id: int) -> None:
        self._store = ExperimentStore(store_path)
        self._trial_id = trial_id
        self._event_files = MetricEventFiles(self._store.trial(trial_id)["tensorboard_dir"])

    def on_start(self, batches_done: int, max_batches: int) -> None:
        self._store.set_progress(self._trial_id, batches_done, max_batches)

    def on_training(self, batches: int, metrics: dict[str, float]) -> None:
        self._store.record_metrics(self._trial_id, "training", batches, metrics)
        self._event_files.write("training", batches, metrics)

    def on_validation(self, batches: int, metrics: dict[str, Any]) -> None:
        self._store.record_metrics(self._trial_id, "validation", batches, metrics)
        self._event_files.write("validation", batches, metrics)

    def on_checkpoint(self, uuid: str, batches: int, path: str, metadata: dict[str, Any]) -> None:
        kept = {key: value for key, value in metadata.items() if key not in _UNRECORDED_METADATA}
        self._store.record_checkpoint(self._trial_id, uuid, batches, path, _size_of(path), kept)

    def on_checkpoints_deleted(self, uuids: list[str]) -> None:
        self._store.mark_checkpoints_deleted(uuids)


def _size_of(directory: str) -> int:
    return sum(
        path.stat().st_size for path in Path(directory).rglob("*") if path.is_file() and not os.path.islink(path)
    )
