"""TrainStep: runs the model's own train function, and on several processes agrees on when to stop."""

from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from det_estimator import _horovod
from det_estimator.keras._engine import _keras_compat


class TrainStep:
    """Runs ``model.make_train_function()`` for a number of batches, as ``model.fit`` would.

    On several processes, every call also sums two flags over all processes in the
    same compiled step (one small allreduce beside the gradients'): "pause requested"
    and "a callback set ``model.stop_training``". Every process then stops after the
    same batch, however the request reached it. One process needs no collective.

    Args:
        model: the compiled model.
        size: how many processes train.
    """

    def __init__(self, model: tf.keras.Model, size: int) -> None:
        self._model = model
        self._function = model.make_train_function()
        # compile(steps_per_execution=n) makes the train function run n batches per call.
        self._per_execution = _keras_compat.steps_per_execution(model)
        self.batches_per_call = 1 if self._per_execution is None else int(self._per_execution.numpy())
        self._agreeing = None
        if size > 1:

            def train_and_agree(iterator: Iterator, flags: tf.Tensor) -> tuple[Any, tf.Tensor]:
                logs = self._function(iterator)
                return logs, _horovod.allreduce_sum(flags, name="det_keras_stop_flags")

            self._agreeing = train_and_agree if model.run_eagerly else tf.function(train_and_agree)

    def trace(self, iterator: Iterator) -> None:
        """Traces the step without running it, which creates every variable of the model and its optimizer."""
        if self._agreeing is not None and isinstance(self._agreeing, tf.types.experimental.GenericFunction):
            self._agreeing.get_concrete_function(iterator, tf.TensorSpec([2], tf.int32))
        elif isinstance(self._function, tf.types.experimental.GenericFunction):
            self._function.get_concrete_function(iterator)

    def __call__(self, iterator: Iterator, batches: int, pause: bool, stop: bool) -> tuple[Any, bool, bool]:
        """Trains ``batches`` batches (at most :attr:`batches_per_call`); returns the logs and the agreed flags.

        On one process the flags are returned as given.
        """
        if batches != self.batches_per_call:
            self._per_execution.assign(batches)
        try:
            if self._agreeing is None:
                return self._function(iterator), pause, stop
            logs, agreed = self._agreeing(iterator, tf.constant([int(pause), int(stop)], tf.int32))
            agreed = agreed.numpy()
            return logs, bool(agreed[0]), bool(agreed[1])
        finally:
            if batches != self.batches_per_call:
                self._per_execution.assign(self.batches_per_call)
