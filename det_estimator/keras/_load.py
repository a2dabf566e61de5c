"""load_model_from_checkpoint_path: the SavedModel of a Keras checkpoint, for inference."""

from pathlib import Path
from typing import Any, Optional, Union

from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind, refuse_other_kind


def load_model_from_checkpoint_path(path: Union[str, Path], tags: Optional[list[str]] = None) -> Any:
    """Loads the SavedModel of a checkpoint written by a ``TFKerasTrial``.

    Every checkpoint of a Keras trial holds its model as a SavedModel (in
    ``saved_model/``, as its metadata's ``keras_checkpoint.contents`` says); this finds
    it under ``path`` and loads it with ``tf.saved_model.load``. The result is a TensorFlow ``AutoTrackable`` whose
    ``signatures["serving_default"]`` takes the model's inputs by name and returns its
    outputs by name, in inference mode.

    Args:
        path: the checkpoint's directory (``checkpoint list`` and ``run_trial``'s outcome give it).
        tags: the MetaGraph tags to load (default ``["serve"]``).

    Returns:
        The loaded SavedModel.

    Raises:
        FileNotFoundError: there is nothing at ``path``.
        NotADirectoryError: ``path`` is a file.
        ValueError: ``path`` is (or holds) a checkpoint of an ``EstimatorTrial``, or one
            of ``DeterminedCallback`` or ``context.fit`` without a SavedModel (the message
            names its loader), or there is no SavedModel under it, or more than one.

    Example:
        ::

            model = det.keras.load_model_from_checkpoint_path(checkpoint_path)
            outputs = model.signatures["serving_default"](x=tf.constant(rows))
    """
    import tensorflow as tf

    refuse_other_kind(path, CheckpointKind.KERAS_TRIAL, CheckpointKind.KERAS)
    found = sorted(Path(path).glob("**/saved_model.pb"))
    kind = checkpoint_kind(path)
    if not found and kind is CheckpointKind.KERAS:
        raise ValueError(
            f"The checkpoint {path} of {kind.description(path)} holds no SavedModel: load it with {kind.loader(path)}."
        )
    if not found:
        raise ValueError(f"There is no SavedModel (saved_model.pb) under {path}: it is not a Keras trial's checkpoint.")
    if len(found) > 1:
        listed = ", ".join(str(item.parent) for item in found)
        raise ValueError(f"There are {len(found)} SavedModels under {path}: {listed}. Pass the path of one of them.")
    checkpoint = found[0].parent.parent  # the checkpoint that holds it: path itself, or one under it
    if checkpoint.name == "saved_models":  # an estimator checkpoint of det-estimator 0.1
        checkpoint = checkpoint.parent
    refuse_other_kind(checkpoint, CheckpointKind.KERAS_TRIAL, CheckpointKind.KERAS)
    return tf.saved_model.load(str(found[0].parent), tags=tags or ["serve"])
