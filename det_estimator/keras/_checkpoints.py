"""What a Keras checkpoint holds besides its metadata, and reading it back.

::

    model/state.*        tf.train.Checkpoint: the model's variables (weights, optimizer
                         slots and learning rate, step counters), TensorFlow's global
                         random generator and the layers' generators
    saved_model/         the model for serving (load_model_from_checkpoint_path)
    callbacks.json/.npz  the states of det.keras.callbacks.Callback instances
    data/rank<N>.*       each process's position in a tf.data training dataset
    <your files>         what callbacks wrote in on_checkpoint_end
"""

from pathlib import Path
from typing import Any

import tensorflow as tf

from det_estimator._checkpoint_kind import KERAS_TRIAL_STATE
from det_estimator.errors import DetEstimatorError
from det_estimator.keras._engine._random_states import generators

MODEL_DIR = "model"
_STATE = KERAS_TRIAL_STATE


class CheckpointMismatchError(DetEstimatorError, ValueError):
    """A checkpoint's variables do not match the model the trial built."""


def _trackables(model: tf.keras.Model) -> dict[str, Any]:
    # The optimizer is an attribute of the compiled model, so it is saved with it.
    return {"model": model, **generators(model)}


def write_variables(directory: Path, model: tf.keras.Model) -> None:
    """Writes the model's variables (optimizer included) and the random generators' states into a checkpoint."""
    (directory / MODEL_DIR).mkdir()
    tf.train.Checkpoint(**_trackables(model)).write(str(directory / MODEL_DIR / _STATE))


def read_variables(directory: Path, model: tf.keras.Model) -> None:
    """Restores what :func:`write_variables` wrote; variables not created yet get their value when they are.

    Raises:
        CheckpointMismatchError: the checkpoint holds variables of another model.
    """
    status = tf.train.Checkpoint(**_trackables(model)).read(str(directory / MODEL_DIR / _STATE))
    try:
        status.assert_existing_objects_matched()
    except AssertionError as error:
        raise CheckpointMismatchError(
            f"The checkpoint {directory} holds the variables of another model than build_model() builds now: {error}"
        ) from None
    status.expect_partial()
