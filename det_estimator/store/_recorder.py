"""StoreRecorder: one trial run's progress, metrics and checkpoints, written to the store as they happen."""

import os
from pathlib import Path
from typing import Any, Optional

from det_estimator.store._event_files import MetricEventFiles
from det_estimator.store._records import MetricKind

# Checkpoint metadata the store does not repeat: large, and only for resuming.
_UNRECORDED_METADATA = ("rng_states", "config", "files")


class StoreRecorder:
    """Records one trial's metrics and checkpoints in a store; the chief process holds it.

    It writes through the store client it is given, which its owner closes. Numeric
    metrics also go to TensorBoard event files in the trial's ``tensorboard_dir``, with its
    hyperparameters in the HParams plugin's format.

    Args:
        store: the store (an :class:`ExperimentStore`, or any client with its methods).
        trial_id: the trial's id in that store.
        run_id: the trial run the records belong to, if the run was recorded.
    """

    def __init__(self, store: Any, trial_id: int, run_id: Optional[int] = None) -> None:
        self.store = store
        self.trial_id = trial_id
        self.run_id = run_id
        start_batches = 0 if run_id is None else self.store.trial_run(run_id).start_batches
        trial = self.store.trial(trial_id)
        self._event_files = MetricEventFiles(trial.tensorboard_dir, start_batches, hparams=trial.hparams)

    def on_start(self, batches_done: int, max_batches: Optional[int]) -> None:
        """Training starts (or resumes) with ``batches_done`` of ``max_batches`` (None: as recorded) behind it."""
        self.store.set_progress(self.trial_id, batches_done, max_batches)

    def on_progress(self, batches: int) -> None:
        """``batches`` batches are trained so far."""
        self.store.set_progress(self.trial_id, batches)

    def on_training(self, batches: int, metrics: dict[str, Any]) -> None:
        """A workload ended after ``batches`` batches with these training metrics."""
        self.store.record_metrics(self.trial_id, MetricKind.TRAINING, batches, metrics, self.run_id)
        self._event_files.write(MetricKind.TRAINING.value, batches, metrics)

    def on_validation(self, batches: int, metrics: dict[str, Any]) -> None:
        """A validation after ``batches`` batches gave these metrics."""
        self.store.record_metrics(self.trial_id, MetricKind.VALIDATION, batches, metrics, self.run_id)
        self._event_files.write(MetricKind.VALIDATION.value, batches, metrics)

    def on_checkpoint(self, uuid: str, batches: int, path: str, metadata: dict[str, Any]) -> None:
        """A checkpoint was sealed at ``path``."""
        kept = {key: value for key, value in metadata.items() if key not in _UNRECORDED_METADATA}
        self.store.record_checkpoint(self.trial_id, uuid, batches, path, _size_of(path), kept, self.run_id)

    def on_checkpoint_validation(self, uuid: str, path: str, metrics: dict[str, Any]) -> None:
        """Validation metrics were added to the ``metadata.json`` of the sealed checkpoint at ``path``."""
        self.store.record_checkpoint_validation(uuid, metrics, size_bytes=_size_of(path))

    def on_checkpoints_deleted(self, uuids: list[str]) -> None:
        """Retention deleted these checkpoints."""
        self.store.mark_checkpoints_deleted(uuids)

    def close(self) -> None:
        """Closes the TensorBoard event files (the store stays open: it is its owner's)."""
        self._event_files.close()


def _size_of(directory: str) -> int:
    return sum(
        path.stat().st_size for path in Path(directory).rglob("*") if path.is_file() and not os.path.islink(path)
    )
