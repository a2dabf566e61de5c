"""Checkpoints sealed on disk and recorded in a store as a trial records them, for the checkpoint commands' tests."""

from pathlib import Path
from typing import Any

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.store import ExperimentStore

# The files an EstimatorTrial's checkpoint holds (their contents do not matter here).
ESTIMATOR_FILES = {
    "model/checkpoint": b'model_checkpoint_path: "model.ckpt-4"\n',
    "model/model.ckpt-4.index": b"index",
    "model/model.ckpt-4.data-00000-of-00001": b"d" * 2000,
    "input/rank-0/input.ckpt.index": b"input",
    "raw/saved_model.pb": b"p" * 300,
    "raw/variables/variables.index": b"v",
}


def seal(store_path: Path, files: dict[str, bytes], batches: int, **metadata: Any) -> Path:
    """Writes a checkpoint of trial 1 holding ``files`` and records it in the store, as a trial would."""
    with TrialCheckpoints(store_path.parent / "checkpoints").write({"steps_completed": batches, **metadata}) as pending:
        for name, data in files.items():
            (pending.path / name).parent.mkdir(parents=True, exist_ok=True)
            (pending.path / name).write_bytes(data)
    checkpoint = pending.checkpoint
    with ExperimentStore(store_path) as store:
        kept = {key: value for key, value in checkpoint.metadata.items() if key != "files"}
        store.record_checkpoint(1, checkpoint.uuid, batches, str(checkpoint.path), 1234, kept)
    return checkpoint.path
