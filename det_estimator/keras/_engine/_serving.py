"""The SavedModel every Keras checkpoint carries, for serving."""

import logging
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from det_estimator.keras._engine import _keras_compat

logger = logging.getLogger("det_estimator.keras")


class ServingExport:
    """Writes the model as a SavedModel with a ``serving_default`` signature (inference, ``training=False``).

    The signature is traced once, on the model's input specs, and reused for every
    checkpoint; only the variables' values change between exports. The SavedModel holds
    the model's variables and that one function, without Keras' own serialization of
    every layer, so writing it takes a fraction of a second; load it with
    ``tf.saved_model.load`` (:func:`det.keras.load_model_from_checkpoint_path` rebuilds the Keras model instead).

    Args:
        model: the trained Keras model.
    """

    def __init__(self, model: tf.keras.Model) -> None:
        self._model = model
        self._signature: Optional[Any] = None
        self._holder: Optional[tf.Module] = None
        self._warned = False

    def ready(self) -> bool:
        """Whether the model's inputs are known, so that it can be exported (it was called once at least)."""
        if self._signature is None and not _keras_compat.inputs_known(self._model):
            if not self._warned:
                self._warned = True
                logger.warning("The model was never called, so its inputs are unknown: no SavedModel is written.")
            return False
        return True

    def write(self, directory: Path) -> bool:
        """Writes the SavedModel into ``directory``; returns False if the model's inputs are not known yet."""
        if self._signature is None:
            if not self.ready():
                return False
            self._signature = _keras_compat.serving_signature(self._model)
            self._holder = tf.Module()
            self._holder.model_variables = list(self._model.variables)
        tf.saved_model.save(self._holder, str(directory), signatures={"serving_default": self._signature})
        return True
