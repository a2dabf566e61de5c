"""The trial's callbacks as the harness calls them: Keras' hooks, epochs by records_per_epoch, and det's own hooks."""

import logging
from typing import Any, Optional

import tensorflow as tf

from det_estimator import _heartbeat
from det_estimator.errors import PermanentTrialError
from det_estimator.keras.callbacks import Callback, EarlyStopping, ReduceLROnPlateau, TensorBoard

logger = logging.getLogger("det_estimator.keras")

# Ours act on validations and the workloads, and never need epochs.
_OWN = (EarlyStopping, ReduceLROnPlateau, TensorBoard)


class CallbackError(PermanentTrialError, ValueError):
    """A callback the harness cannot run as it is written."""


class CallbackTypeError(CallbackError, TypeError):
    """keras_callbacks() returned something other than Keras callbacks."""


class TrialCallbacks:
    """Calls the trial's callbacks (``keras_callbacks()``) at the points of training where ``model.fit`` would.

    Args:
        callbacks: what ``keras_callbacks()`` returned.
        model: the trial's model.
        batches_per_epoch: ``records_per_epoch // global_batch_size``, or None when the
            config has no ``records_per_epoch``.
        tensorboard_dir: the trial's TensorBoard directory (the chief's), or None.
        rank: this process's rank; ``TensorBoard`` callbacks run on the chief only.

    Raises:
        CallbackTypeError: an entry is not a Keras callback.
        CallbackError: a ``det.keras.callbacks.Callback`` overrides ``on_epoch_end``
            and the config has no ``records_per_epoch``.
    """

    def __init__(
        self,
        callbacks: Any,
        model: tf.keras.Model,
        batches_per_epoch: Optional[int],
        tensorboard_dir: Optional[str],
        rank: int,
    ) -> None:
        callbacks = _checked(callbacks, batches_per_epoch)
        for callback in callbacks:
            if isinstance(callback, TensorBoard) and tensorboard_dir is not None:
                callback.use_directory(tensorboard_dir)
        if rank != 0:
            callbacks = [callback for callback in callbacks if not isinstance(callback, TensorBoard)]
        self._batches_per_epoch = batches_per_epoch
        self.stateful = [callback for callback in callbacks if isinstance(callback, Callback)]
        self._keras = tf.keras.callbacks.CallbackList(callbacks, add_history=False, add_progbar=False, model=model)
        self._keras.set_params({"verbose": 0, "epochs": None, "steps": batches_per_epoch})
        # Keras' evaluate() calls every test hook on this one but on_test_end, which the
        # harness calls itself with the metrics of every process combined.
        self.for_evaluate = _WithoutTestEnd([*callbacks, _Heartbeat()], add_history=False, add_progbar=False)

    def on_train_begin(self, batches: int) -> None:
        """Training (re)starts after ``batches`` batches; an epoch begins if epochs are counted."""
        self._keras.on_train_begin()
        for callback in self._keras.callbacks:
            if isinstance(callback, TensorBoard):
                callback.start_run_after(batches)
        if self._batches_per_epoch:
            self._keras.on_epoch_begin(batches // self._batches_per_epoch)

    def on_train_end(self) -> None:
        """This run of the trial ends (completed, paused or stopped)."""
        self._keras.on_train_end()

    def batch_index(self, batches: int) -> int:
        """The ``batch`` Keras' batch hooks get for the batch after ``batches``: its index in its epoch."""
        return batches % self._batches_per_epoch if self._batches_per_epoch else batches

    def on_train_batch_begin(self, batches: int) -> None:
        """A batch starts after ``batches`` batches."""
        self._keras.on_train_batch_begin(self.batch_index(batches))

    def on_train_batch_end(self, batches: int, trained: int, logs: Any) -> None:
        """``trained`` batches (one Keras step) ended with ``batches`` trained in all."""
        self._keras.on_train_batch_end(self.batch_index(batches - trained), logs)
        per_epoch = self._batches_per_epoch
        if per_epoch and batches % per_epoch == 0:
            self._keras.on_epoch_end(batches // per_epoch - 1, {})
            self._keras.on_epoch_begin(batches // per_epoch)

    def batches_to_epoch_end(self, batches: int) -> Optional[int]:
        """How many batches are left in the current epoch, or None when epochs are not counted."""
        per_epoch = self._batches_per_epoch
        return per_epoch - batches % per_epoch if per_epoch else None

    def on_test_end(self, logs: dict[str, Any]) -> None:
        """A validation ended with ``logs``, the metrics of every process combined."""
        # Each callback's own hook: Keras 3's CallbackList refuses an end whose begin it did not
        # see, and on_test_begin went through for_evaluate, the list evaluate() calls.
        for callback in self._keras.callbacks:
            callback.on_test_end(dict(logs))

    def on_train_workload_begin(self, batches: int, requested: int) -> None:
        """A workload of ``requested`` batches starts after ``batches``."""
        for callback in self.stateful:
            callback.on_train_workload_begin(batches, requested, {})

    def on_train_workload_end(self, batches: int, logs: dict[str, Any]) -> None:
        """A workload ended after ``batches`` batches with training metrics ``logs``."""
        for callback in self.stateful:
            callback.on_train_workload_end(batches, dict(logs))

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """A checkpoint is being written into ``checkpoint_dir`` (on the chief)."""
        for callback in self.stateful:
            callback.on_checkpoint_end(checkpoint_dir)


class _Heartbeat(tf.keras.callbacks.Callback):
    """Counts every step of an evaluation as progress, so that a long validation is not taken for a hang."""

    def on_test_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        _heartbeat.beat()


class _WithoutTestEnd(tf.keras.callbacks.CallbackList):
    def on_test_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        """Left to the harness, which calls it with the combined metrics."""


def _checked(callbacks: Any, batches_per_epoch: Optional[int]) -> list[tf.keras.callbacks.Callback]:
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(
            f"keras_callbacks() must return a list of Keras callbacks. Received: {type(callbacks).__name__}"
        )
    for index, callback in enumerate(callbacks):
        if not isinstance(callback, tf.keras.callbacks.Callback):
            raise CallbackTypeError(
                f"keras_callbacks() must return a list of tf.keras.callbacks.Callback. Received at index {index}: "
                f"{type(callback).__name__}"
            )
        if isinstance(callback, (tf.keras.callbacks.EarlyStopping, tf.keras.callbacks.ReduceLROnPlateau)) and not (
            isinstance(callback, _OWN)
        ):
            logger.warning(
                "%s acts on epochs' validation metrics, which training in workloads does not have, and loses its "
                "state at every pause: use det.keras.callbacks.%s, which acts on every validation and keeps its state.",
                type(callback).__qualname__,
                type(callback).__name__,
            )
        if batches_per_epoch or isinstance(callback, _OWN) or not _overrides_epoch_end(callback):
            continue
        if isinstance(callback, Callback):
            raise CallbackError(
                f"{type(callback).__qualname__} overrides on_epoch_end, which is called every records_per_epoch "
                "records; the experiment config has no records_per_epoch. Set it, or act in on_train_workload_end "
                "or on_test_end instead."
            )
        logger.warning(
            "%s overrides on_epoch_end, which never runs: the experiment config has no records_per_epoch.",
            type(callback).__qualname__,
        )
    return list(callbacks)


def _overrides_epoch_end(callback: tf.keras.callbacks.Callback) -> bool:
    # A method of its class, or a function set on the instance (LambdaCallback's way).
    method = callback.on_epoch_end
    return getattr(method, "__func__", method) is not tf.keras.callbacks.Callback.on_epoch_end
