"""Loading the SavedModels that every estimator checkpoint carries, for inference."""

import logging
from typing import Any, Optional

from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind, refuse_other_kind
from det_estimator._saved_models import saved_models_of

# What TensorFlow logs for every variable of a SavedModel exported from a graph (as every
# Estimator export is) when it is loaded: the variables are not visible to training
# APIs, which does not matter for inference, the only use of the loaded model here.
_REFERENCE_VARIABLE_NOTICE = "Unable to create a python object for variable"


class _WithoutReferenceVariableNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_REFERENCE_VARIABLE_NOTICE)


def load_estimator_from_checkpoint_path(
    path: str, tags: Optional[list[str]] = None, serving_name: Optional[str] = None
) -> Any:
    """Loads a SavedModel exported with a checkpoint, ready for inference.

    Args:
        path: the checkpoint's directory.
        tags: the MetaGraph tags to load (default ``["serve"]``).
        serving_name: which export, by its name in ``build_serving_input_receiver_fns()``;
            may be left out when the checkpoint has exactly one.

    Returns:
        The loaded SavedModel (``tf.saved_model.load``); call its ``signatures``.

    Raises:
        FileNotFoundError: there is nothing at ``path``.
        NotADirectoryError: ``path`` is a file.
        ValueError: ``path`` is a Keras checkpoint (the message names its loader), or
            holds no export, or several and no ``serving_name``, or none of that name.
    """
    import tensorflow as tf

    refuse_other_kind(path, CheckpointKind.ESTIMATOR)
    exports = saved_models_of(path)
    if not exports:
        if checkpoint_kind(path) is CheckpointKind.ESTIMATOR:
            raise ValueError(
                f"Checkpoint {path} has no SavedModel: the trial's build_serving_input_receiver_fns() returned no "
                "serving function when it was written."
            )
        raise ValueError(
            f"{path} is not a checkpoint of an EstimatorTrial: it holds no model/ directory and no SavedModel. "
            "Pass the directory of one checkpoint, as `det-estimator checkpoint list` shows it."
        )
    if serving_name is None:
        if len(exports) > 1:
            raise ValueError(
                f"Checkpoint {path} has {len(exports)} SavedModels: {', '.join(exports)}. "
                "Pass serving_name= to pick one."
            )
        serving_name = next(iter(exports))
    elif serving_name not in exports:
        raise ValueError(
            f"Checkpoint {path} has no SavedModel named {serving_name!r}; its SavedModels are: {', '.join(exports)}."
        )
    notices = _WithoutReferenceVariableNotices()
    tf.get_logger().addFilter(notices)
    try:
        return tf.compat.v2.saved_model.load(str(exports[serving_name]), tags=tags or ["serve"])
    finally:
        tf.get_logger().removeFilter(notices)
