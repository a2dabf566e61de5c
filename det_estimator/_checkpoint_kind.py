"""Which kind of trial wrote a checkpoint directory, read from its files (no TensorFlow).

The loaders of each kind use it to refuse, with the loader to use instead, a
checkpoint that another kind wrote, whose SavedModel (if any) they would otherwise
load as if it were theirs:

- an ``EstimatorTrial`` (or ``det.init()``) checkpoint holds its TensorFlow checkpoint
  under ``model/`` with TensorFlow's ``model/checkpoint`` state file, and one SavedModel
  per serving function (det-estimator 0.1: under ``saved_models/``);
- a ``TFKerasTrial`` checkpoint holds ``model/state.*`` and one SavedModel, ``saved_model/``;
- a checkpoint of ``DeterminedCallback`` (and so of ``context.fit``) holds the weights as
  ``model_checkpoint.*`` and no SavedModel.
"""

import enum
from pathlib import Path
from typing import Optional, Union

from det_estimator._saved_models import MODEL_DIR, saved_models_of

# The prefix of a TFKerasTrial's tf.train.Checkpoint, under model/.
KERAS_TRIAL_STATE = "state"
# The prefix of DeterminedCallback's tf.train.Checkpoint of the weights.
CALLBACK_WEIGHTS = "model_checkpoint"
# A TFKerasTrial's SavedModel.
KERAS_TRIAL_SAVED_MODEL = "saved_model"


class CheckpointKind(enum.Enum):
    """What wrote a checkpoint, and how to load it for inference."""

    ESTIMATOR = "an EstimatorTrial"
    KERAS_TRIAL = "a TFKerasTrial"
    KERAS_CALLBACK = "det.keras.DeterminedCallback (or context.fit)"

    @property
    def trial_type(self) -> str:
        """What wrote the checkpoint, as ``checkpoint describe`` names it: a trial class, or the callback."""
        return {
            CheckpointKind.ESTIMATOR: "EstimatorTrial",
            CheckpointKind.KERAS_TRIAL: "TFKerasTrial",
            CheckpointKind.KERAS_CALLBACK: "DeterminedCallback",
        }[self]

    def loader(self, path: Union[str, Path], uuid: Optional[str] = None, serving_name: Optional[str] = None) -> str:
        """What loads the checkpoint at ``path`` of this kind, as a message names it.

        Args:
            path: the checkpoint's directory.
            uuid: its uuid, when known (the callback's checkpoints load by uuid from the store).
            serving_name: the SavedModel an estimator checkpoint's call loads, when known.
        """
        if self is CheckpointKind.ESTIMATOR:
            serving = "..." if serving_name is None else repr(serving_name)
            return f"det.estimator.load_estimator_from_checkpoint_path({str(path)!r}, serving_name={serving})"
        if self is CheckpointKind.KERAS_TRIAL:
            return f"det.keras.load_model_from_checkpoint_path({str(path)!r})"
        return (
            f"context.load_checkpoint_model(checkpoint_uuid={'...' if uuid is None else repr(uuid)}) of "
            f"det.keras.init(), or tf.train.Checkpoint(model=model).read({str(Path(path) / CALLBACK_WEIGHTS)!r}) "
            "into a model built as in training (it holds the weights, not a SavedModel)"
        )

    def saved_models(self, path: Union[str, Path]) -> dict[str, Path]:
        """The SavedModels of the checkpoint at ``path``, by serving name (a TFKerasTrial's one by its directory)."""
        if self is CheckpointKind.ESTIMATOR:
            return saved_models_of(path)
        if self is CheckpointKind.KERAS_TRIAL and (Path(path) / KERAS_TRIAL_SAVED_MODEL / "saved_model.pb").is_file():
            return {KERAS_TRIAL_SAVED_MODEL: Path(path) / KERAS_TRIAL_SAVED_MODEL}
        return {}


def checkpoint_kind(path: Union[str, Path]) -> Optional[CheckpointKind]:
    """The kind of trial that wrote the checkpoint at ``path``, or None when its files name none."""
    checkpoint = Path(path)
    if (checkpoint / MODEL_DIR / "checkpoint").is_file() or (checkpoint / "saved_models").is_dir():
        return CheckpointKind.ESTIMATOR
    if (checkpoint / MODEL_DIR / f"{KERAS_TRIAL_STATE}.index").is_file():
        return CheckpointKind.KERAS_TRIAL
    if (checkpoint / f"{CALLBACK_WEIGHTS}.index").is_file():
        return CheckpointKind.KERAS_CALLBACK
    return None


def refuse_other_kind(path: Union[str, Path], expected: CheckpointKind) -> None:
    """Raises when ``path`` is not a directory, or a checkpoint of another kind than ``expected``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotADirectoryError: ``path`` is a file.
        ValueError: ``path`` is a checkpoint of another kind; the message names its loader.
    """
    checkpoint = Path(path)
    if not checkpoint.exists():
        raise FileNotFoundError(f"There is no checkpoint at {path}: no such file or directory.")
    if not checkpoint.is_dir():
        raise NotADirectoryError(f"{path} is a file, not a checkpoint's directory.")
    kind = checkpoint_kind(checkpoint)
    if kind is not None and kind is not expected:
        saved_models = ", ".join(saved_models_of(checkpoint)) if kind is CheckpointKind.ESTIMATOR else ""
        held = f" (its SavedModels: {saved_models})" if saved_models else ""
        raise ValueError(
            f"{path} is a checkpoint of {kind.value}{held}, not of {expected.value}: load it with {kind.loader(path)}."
        )
