"""load_model_from_checkpoint_path: the trained Keras model of a Keras checkpoint, for inference."""

import logging
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind, refuse_other_kind

logger = logging.getLogger("det_estimator.keras")

_KERAS_KINDS = (CheckpointKind.KERAS, CheckpointKind.KERAS_CALLBACK)


def load_model_from_checkpoint_path(
    path: Union[str, Path],
    tags: Optional[list[str]] = None,
    *,
    model: Optional[Any] = None,
    custom_objects: Optional[dict[str, Any]] = None,
) -> Any:
    """Loads the model of a checkpoint written by a ``TFKerasTrial`` (or another Keras front end) as a Keras model.

    As the reference system's loader does, the result is a ``tf.keras.Model`` with the
    checkpoint's trained weights, called as ``model(samples)`` or ``model.predict(...)``.
    It is rebuilt from the architecture every checkpoint of a model Keras can describe
    holds (``model/architecture.json``; a ``Sequential`` or functional model), or read
    into ``model`` when given (a subclassed model's checkpoint has no architecture).
    The checkpoint's SavedModel, for serving without Python, stays under
    ``saved_model/``: ``tf.saved_model.load(path + "/saved_model")``.

    Args:
        path: the checkpoint's directory (``checkpoint list`` and ``run_trial``'s outcome
            give it), or a directory that holds exactly one checkpoint.
        tags: unused, as in the reference system's last release (the model is rebuilt,
            not read from the SavedModel); a value is noted in a warning.
        model: a model built as in training, to load the weights into (needed when the
            checkpoint holds no architecture); it is returned.
        custom_objects: layers and functions of your own that the architecture names.

    Returns:
        The Keras model, in inference use (its optimizer's state is not loaded).

    Raises:
        FileNotFoundError: there is nothing at ``path``.
        NotADirectoryError: ``path`` is a file.
        ValueError: ``path`` is (or holds) a checkpoint of an ``EstimatorTrial`` (the
            message names its loader), or no Keras checkpoint, or more than one; or the
            checkpoint holds no architecture and no ``model`` was given.

    Example:
        ::

            model = det.keras.load_model_from_checkpoint_path(checkpoint_path)
            predictions = model(samples)
    """
    from det_estimator.keras._engine import _format, _inference

    refuse_other_kind(path, CheckpointKind.KERAS_TRIAL, *_KERAS_KINDS)
    checkpoint = _the_checkpoint(Path(path))
    refuse_other_kind(checkpoint, CheckpointKind.KERAS_TRIAL, *_KERAS_KINDS)
    if tags is not None:
        logger.warning(
            "load_model_from_checkpoint_path: tags=%s is unused: the Keras model is rebuilt from the checkpoint's "
            "architecture and weights, not loaded from its SavedModel (load that with tf.saved_model.load(%r, tags)).",
            tags,
            str(checkpoint / _format.SAVED_MODEL),
        )
    return _inference.load_model(checkpoint, model=model, custom_objects=custom_objects)


def _the_checkpoint(path: Path) -> Path:
    """The checkpoint ``path`` is, is in (a SavedModel of it), or holds alone.

    Raises:
        ValueError: there is no checkpoint there, or more than one under it.
    """
    if checkpoint_kind(path) is not None:
        return path
    if checkpoint_kind(path.parent) is not None:
        return path.parent
    found = sorted({metadata.parent for metadata in path.glob("**/metadata.json") if checkpoint_kind(metadata.parent)})
    if not found:
        raise ValueError(f"There is no Keras checkpoint at or under {path}: it is not a Keras trial's checkpoint.")
    if len(found) > 1:
        listed = ", ".join(str(item) for item in found)
        raise ValueError(f"There are {len(found)} checkpoints under {path}: {listed}. Pass the path of one of them.")
    return found[0]
