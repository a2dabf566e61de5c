"""Loading the SavedModels that every estimator checkpoint carries, for inference."""

from typing import Any, Optional

from det_estimator._saved_models import saved_models_of


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
        ValueError: the checkpoint has no export, or several and no ``serving_name``,
            or none of that name.
    """
    import tensorflow as tf

    exports = saved_models_of(path)
    if not exports:
        raise ValueError(
            f"Checkpoint {path} has no SavedModel: the trial's build_serving_input_receiver_fns() returned no "
            "serving function when it was written (or the path is not a det-estimator checkpoint)."
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
    return tf.compat.v2.saved_model.load(str(exports[serving_name]), tags=tags or ["serve"])
