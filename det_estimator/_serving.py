"""Loading the SavedModels that every checkpoint carries."""

from pathlib import Path
from typing import Any, Optional

SAVED_MODELS_DIR = "saved_models"


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

    exports_dir = Path(path) / SAVED_MODELS_DIR
    names = sorted(p.name for p in exports_dir.iterdir() if p.is_dir()) if exports_dir.is_dir() else []
    if not names:
        raise ValueError(
            f"Checkpoint {path} has no SavedModel: the trial's build_serving_input_receiver_fns() returned no "
            "serving function when it was written (or the path is not a det-estimator checkpoint)."
        )
    if serving_name is None:
        if len(names) > 1:
            raise ValueError(
                f"Checkpoint {path} has {len(names)} SavedModels: {', '.join(names)}. Pass serving_name= to pick one."
            )
        serving_name = names[0]
    elif serving_name not in names:
        raise ValueError(
            f"Checkpoint {path} has no SavedModel named {serving_name!r}; its SavedModels are: {', '.join(names)}."
        )
    return tf.compat.v2.saved_model.load(str(exports_dir / serving_name), tags=tags or ["serve"])
