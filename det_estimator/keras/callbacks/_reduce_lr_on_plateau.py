"""ReduceLROnPlateau: Keras' ReduceLROnPlateau, counting validations instead of epochs, with its state kept."""

from typing import Any

import tensorflow as tf

from det_estimator.keras.callbacks._callback import Callback
from det_estimator.keras.callbacks._validation_driven import ValidationDriven


class ReduceLROnPlateau(ValidationDriven, tf.keras.callbacks.ReduceLROnPlateau, Callback):
    """Reduces the learning rate when a monitored validation metric has stopped improving.

    It takes the arguments of ``tf.keras.callbacks.ReduceLROnPlateau`` and behaves like
    it, except that it checks after every validation (``on_test_end``, on the metrics of
    every process combined) rather than after every epoch: ``patience`` and ``cooldown``
    count validations, so set ``min_validation_period`` in the experiment config to how
    often it should look. ``monitor`` may name a metric with or without its ``val_``
    prefix. ``ReduceLRScheduler`` is another name for it.

    Its state (the validations seen, ``wait``, the cooldown counter and the best value)
    is saved in every checkpoint and restored when the trial resumes; the learning rate
    itself is a variable of the optimizer, which every checkpoint holds. A paused and
    resumed trial therefore reduces its learning rate at the same validations as one
    that ran without a pause.

    Example:
        ::

            def keras_callbacks(self):
                return [det.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2)]
    """

    def get_state(self) -> dict[str, Any]:
        """Everything that changes during training (the configuration comes from the constructor)."""
        return {
            "validations": self.validations,
            "wait": self.wait,
            "cooldown_counter": self.cooldown_counter,
            # None before the first validation in Keras 3 (Keras 2 starts at an infinity).
            "best": None if self.best is None else float(self.best),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restores the state saved by :meth:`get_state`."""
        self.validations = state["validations"]
        self.wait = state["wait"]
        self.cooldown_counter = state["cooldown_counter"]
        self.best = state["best"]


# The name the reference system's documentation gives it.
ReduceLRScheduler = ReduceLROnPlateau
