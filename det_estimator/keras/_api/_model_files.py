"""The model's architecture in the checkpoints ``context.fit`` writes, and a model loaded back from one.

``DeterminedCallback`` checkpoints the weights and the optimizer's state (a TensorFlow
checkpoint, ``model_checkpoint``). ``context.fit`` adds the architecture beside them
(``model_architecture.json``, Keras' ``model.to_json()``), so that
``context.load_checkpoint_model`` rebuilds the model with no code of the training
script. A subclassed model has no such description: load it into a model you build
(``load_checkpoint_model(..., model=build_model())``).
"""

import json
import logging
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from det_estimator import core
from det_estimator._checkpoint_kind import checkpoint_kind
from det_estimator.errors import DetEstimatorError
from det_estimator.keras._determined_callback import STATE_FILE, WEIGHTS_PREFIX, DeterminedCallback

logger = logging.getLogger("det_estimator.keras")

ARCHITECTURE_FILE = "model_architecture.json"


class CheckpointLoadError(DetEstimatorError, ValueError):
    """A checkpoint cannot be loaded as a Keras model."""


def architecture_of(model: tf.keras.Model) -> Optional[str]:
    """The model's architecture as Keras' JSON, or None for a model Keras cannot describe (subclassed)."""
    try:
        return model.to_json()
    except (NotImplementedError, TypeError, ValueError) as error:
        logger.info("the checkpoints hold no architecture of this model (%s); load them into a model you build", error)
        return None


class ArchitectureCallback(DeterminedCallback):
    """``DeterminedCallback`` whose checkpoints also hold the model's architecture (``context.fit``'s).

    Args:
        core_context: the core context.
        architecture: the model's architecture (:func:`architecture_of`), or None for none.
        **kwargs: ``DeterminedCallback``'s other arguments.
    """

    def __init__(self, core_context: core.Context, architecture: Optional[str], **kwargs: Any) -> None:
        super().__init__(core_context, **kwargs)
        self._architecture = architecture

    @property
    def last_storage_id(self) -> Optional[str]:
        """The storage id of the last checkpoint the callback wrote, or None."""
        return self._saved_storage_id

    def _write_chief_files(self, path: Path) -> None:
        if self._architecture is not None:
            (path / ARCHITECTURE_FILE).write_text(self._architecture, encoding="utf-8")


def load_model(path: Path, model: Optional[tf.keras.Model] = None, custom_objects: Optional[dict] = None) -> Any:
    """The Keras model of a checkpoint written by ``context.fit`` (or ``DeterminedCallback``).

    Args:
        path: the checkpoint's directory.
        model: a model of the same architecture to load the weights into (needed when
            the checkpoint holds no architecture); it is returned.
        custom_objects: layers and functions of your own the architecture names.

    Raises:
        CheckpointLoadError: the checkpoint has no Keras weights, or no architecture and no ``model`` was given.
    """
    if not Path(f"{path / WEIGHTS_PREFIX}.index").is_file():
        if not Path(path).is_dir():
            raise CheckpointLoadError(f"The checkpoint {path} is not there: its directory does not exist.")
        kind = checkpoint_kind(path)
        written_by = f"{kind.value}: load it with {kind.loader(path)}" if kind else "something else"
        raise CheckpointLoadError(
            f"The checkpoint {path} holds no Keras weights ({WEIGHTS_PREFIX}.index): it was not written by "
            f"context.fit() or det.keras.DeterminedCallback, but by {written_by}."
        )
    if model is None:
        architecture = path / ARCHITECTURE_FILE
        if not architecture.is_file():
            raise CheckpointLoadError(
                f"The checkpoint {path} holds the weights but not the architecture of its model (a subclassed "
                "model, or one trained with DeterminedCallback alone): pass model=<a model built as in training>."
            )
        model = tf.keras.models.model_from_json(architecture.read_text(encoding="utf-8"), custom_objects=custom_objects)
    status = tf.train.Checkpoint(model=model).read(str(path / WEIGHTS_PREFIX))
    status.expect_partial()  # the optimizer's state is there too, and unused for inference
    try:
        status.assert_existing_objects_matched()
    except AssertionError as error:
        raise CheckpointLoadError(f"The checkpoint {path} holds the weights of another model: {error}") from None
    return model


def checkpoint_state(path: Path) -> dict[str, Any]:
    """The position a checkpoint was written at (epoch, batch, steps), as the callback saved it."""
    state = path / STATE_FILE
    return json.loads(state.read_text(encoding="utf-8")) if state.is_file() else {}
