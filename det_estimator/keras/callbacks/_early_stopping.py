"""EarlyStopping: Keras' EarlyStopping, counting validations instead of epochs, with its state kept across pauses."""

from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator.keras.callbacks._callback import Callback
from det_estimator.keras.callbacks._validation_driven import ValidationDriven


class EarlyStopping(ValidationDriven, tf.keras.callbacks.EarlyStopping, Callback):
    """Stops training when a monitored validation metric has stopped improving.

    It takes the arguments of ``tf.keras.callbacks.EarlyStopping`` and behaves like it,
    except that it checks after every validation (``on_test_end``, on the metrics of
    every process combined) rather than after every epoch: ``patience`` and
    ``start_from_epoch`` count validations, so set ``min_validation_period`` in the
    experiment config to how often it should look. ``monitor`` may name a metric with
    or without its ``val_`` prefix (``"val_loss"`` and ``"loss"`` both read the
    validation loss).

    Its whole state is saved in every checkpoint and restored when the trial resumes:
    the validations seen, ``wait``, the best value and when it was seen, and the best
    weights when ``restore_best_weights`` is set. A paused and resumed trial therefore
    stops at the same validation as one that ran without a pause.

    When it stops training, the trial validates, checkpoints and ends as COMPLETED.

    Example:
        ::

            def keras_callbacks(self):
                return [det.keras.callbacks.EarlyStopping(monitor="val_auc", mode="max", patience=3)]
    """

    def on_test_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        """Keras' epoch logic on this validation; a stop restores the best weights then, as Keras 2.15 does."""
        validation = self.validations
        super().on_test_end(logs)
        stopped_here = getattr(self.model, "stop_training", False) and self.stopped_epoch == validation > 0
        if stopped_here and self.restore_best_weights and self.best_weights is not None:
            self.model.set_weights(self.best_weights)

    def on_train_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        """Says that training stopped early; restores nothing.

        Keras 3 and tf-keras 2.16+ restore the best weights here, at the end of every run: a
        pause's too, which would resume from them. The stop restored them already.
        """
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")

    def get_state(self) -> dict[str, Any]:
        """Everything that changes during training (the configuration comes from the constructor)."""
        return {
            "validations": self.validations,
            "wait": self.wait,
            "stopped_epoch": self.stopped_epoch,
            # None before the first validation in Keras 3 (Keras 2 starts at an infinity).
            "best": None if self.best is None else float(self.best),
            "best_epoch": self.best_epoch,
            "best_weights": self.best_weights,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restores the state saved by :meth:`get_state`."""
        self.validations = state["validations"]
        self.wait = state["wait"]
        self.stopped_epoch = state["stopped_epoch"]
        self.best = state["best"]
        self.best_epoch = state["best_epoch"]
        weights = state["best_weights"]
        self.best_weights = None if weights is None else [np.asarray(weight) for weight in weights]
