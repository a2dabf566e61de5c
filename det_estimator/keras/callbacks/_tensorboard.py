"""TensorBoard: Keras' TensorBoard callback, writing into the trial's TensorBoard directory."""

import logging
import os
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2

from det_estimator.keras._engine import _keras_compat
from det_estimator.keras.callbacks._callback import Callback
from det_estimator.store import session_start

logger = logging.getLogger("det_estimator.keras")

# Below the trial's TensorBoard directory, next to the metrics the experiment store writes
# there itself (training/ and validation/).
SUBDIRECTORY = "keras"


class TensorBoard(tf.keras.callbacks.TensorBoard, Callback):
    """Keras' TensorBoard callback, writing under the experiment's TensorBoard directory.

    It takes the arguments of ``tf.keras.callbacks.TensorBoard`` except ``log_dir``,
    which is ignored (with a warning): the events go to ``keras/`` in the trial's
    TensorBoard directory (``core_context.train.get_tensorboard_path()``), beside the
    training and validation metrics the experiment store writes there, so that
    ``tensorboard --logdir <store>-files/experiments/<id>`` shows everything. Only the
    chief (rank 0) writes.

    Besides what Keras writes (graphs, histograms and profiles on Keras' schedule), it
    writes each workload's training metrics as ``epoch_<name>`` at the step of the
    batches trained, and each validation's combined metrics as
    ``evaluation_<name>_vs_iterations``. ``TFKerasTensorBoard`` is another name for it.

    Example:
        ::

            def keras_callbacks(self):
                return [det.keras.callbacks.TensorBoard(update_freq=100, histogram_freq=1)]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or "log_dir" in kwargs:
            given = args[0] if args else kwargs.pop("log_dir")
            args = args[1:]
            logger.warning(
                "TensorBoard(log_dir=%r) is ignored: the events go to the trial's TensorBoard directory.", given
            )
        # Keras' default, for use outside a trial; the harness sets the trial's directory.
        super().__init__("logs", *args, **kwargs)

    def use_directory(self, trial_directory: str) -> None:
        """Writes under ``trial_directory`` (the harness calls it before training starts)."""
        self.log_dir = os.path.join(trial_directory, SUBDIRECTORY)

    def start_run_after(self, batches: int) -> None:
        """Marks in both event files that this run of the trial starts after ``batches`` batches.

        So that TensorBoard drops the points a run killed after its last checkpoint wrote
        past it, as the event files of the trial's own metrics do (see
        :func:`det_estimator.store.session_start`). Called once training begins (``on_train_begin``).
        """
        start = tf.constant(session_start(batches))
        for writer in _keras_compat.tensorboard_writers(self):
            with writer.as_default():
                summary_ops_v2.import_event(start)
            writer.flush()

    def on_train_workload_end(self, total_batches_trained: int, logs: dict[str, Any]) -> None:
        """Writes the workload's training metrics (and a learning rate schedule's value) at its last batch."""
        _keras_compat.log_epoch_metrics(self, total_batches_trained, dict(logs))


TFKerasTensorBoard = TensorBoard


class CoreTensorBoard(tf.keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback for a script's own ``model.fit``, writing where the experiment's files live.

    ``det.keras.TensorBoard(core_context, ...)`` takes the arguments of
    ``tf.keras.callbacks.TensorBoard`` after ``core_context``. On the chief of a trial
    the events go to ``keras/`` in the trial's TensorBoard directory
    (``core_context.train.get_tensorboard_path()``), beside the metrics the experiment
    store writes there, and ``log_dir`` is ignored; the other processes write into a
    temporary directory removed when the process ends, so that they never mix their
    events with the chief's. Without a TensorBoard directory (no store), ``log_dir``
    is used as Keras would.

    Args:
        core_context: the context of ``det.core.init()``.
        *args: the arguments of ``tf.keras.callbacks.TensorBoard``.
        **kwargs: its keyword arguments.

    Example:
        ::

            tensorboard = det.keras.TensorBoard(core_context, histogram_freq=1)
            model.fit(x, y, callbacks=[det_callback, tensorboard])
    """

    def __init__(self, core_context: Any, *args: Any, **kwargs: Any) -> None:
        given = args[0] if args else kwargs.pop("log_dir", "logs")
        args = args[1:]
        directory = core_context.train.get_tensorboard_path()
        if directory is not None:
            log_dir = os.path.join(str(directory), SUBDIRECTORY)
            if given != "logs":
                logger.warning("TensorBoard(log_dir=%r) is ignored: the events go to %s.", given, log_dir)
        elif core_context.distributed.rank != 0:
            import tempfile

            self._scratch = tempfile.TemporaryDirectory(prefix="det-estimator-tensorboard-")
            log_dir = self._scratch.name
        else:
            log_dir = given
        super().__init__(log_dir, *args, **kwargs)
