"""A Keras checkpoint's model for inference: rebuilt from its architecture, with its trained weights.

Of any front end (TFKerasTrial, DeterminedCallback, ``context.fit``) and any layout the
format reads (``_format``); ``det.keras.load_model_from_checkpoint_path`` and the new
Keras API's ``load_checkpoint_model`` both come here.
"""

from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind
from det_estimator.keras._engine._format import FORMAT_3, VARIABLES, CheckpointLoadError, read


def load_model(path: Path, model: Optional[tf.keras.Model] = None, custom_objects: Optional[dict] = None) -> Any:
    """The Keras model of a Keras checkpoint, of any front end and layout, with its trained weights.

    Args:
        path: the checkpoint's directory.
        model: a model of the same architecture to load the weights into (needed when
            the checkpoint holds no architecture); it is returned.
        custom_objects: layers and functions of your own the architecture names.

    Raises:
        CheckpointLoadError: the checkpoint has no Keras weights it can load, or no
            architecture and no ``model`` was given.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointLoadError(f"The checkpoint {path} is not there: its directory does not exist.")
    kind = checkpoint_kind(path)
    if kind not in (CheckpointKind.KERAS, CheckpointKind.KERAS_CALLBACK, CheckpointKind.KERAS_TRIAL):
        written_by = f"{kind.value}: load it with {kind.loader(path)}" if kind else "something else"
        raise CheckpointLoadError(
            f"The checkpoint {path} holds no Keras weights ({VARIABLES}.index): it was not written by a "
            f"TFKerasTrial, context.fit() or det.keras.DeterminedCallback, but by {written_by}."
        )
    state = read(path)
    if model is None:
        if state.architecture is None:
            raise CheckpointLoadError(
                f"The checkpoint {path} holds the weights but not the architecture of its model (a subclassed "
                "model, or a checkpoint written before architectures were kept): pass model=<a model built as in "
                "training>."
            )
        architecture = state.architecture.read_text(encoding="utf-8")
        model = tf.keras.models.model_from_json(architecture, custom_objects=custom_objects)
    # The model's own variables alone: the optimizer's state is there too, and unused for inference.
    root = tf.train.Checkpoint(root=model) if state.layout == FORMAT_3 else tf.train.Checkpoint(model=model)
    status = root.read(state.variables)
    status.expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as error:
        raise CheckpointLoadError(f"The checkpoint {path} holds the weights of another model: {error}") from None
    return model
