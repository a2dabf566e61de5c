"""What the process must set before TensorFlow starts: eager mode, one GPU per process, the session config's pools."""

import logging

import tensorflow as tf

from det_estimator.core._devices import pin_local_gpu
from det_estimator.errors import PermanentTrialError

logger = logging.getLogger("det_estimator.keras")

__all__ = ["EagerModeError", "apply_session_config", "pin_local_gpu", "require_eager"]


class EagerModeError(PermanentTrialError, RuntimeError):
    """TensorFlow 2's eager mode, which a Keras trial runs in, was turned off in the trial's process."""


def require_eager() -> None:
    """Checks that TensorFlow 2's eager mode is on, which Keras trials need.

    Raises:
        EagerModeError: eager execution or V2 behaviour was disabled in this process. A
            restart would import the same code and fail the same way, so the trial is
            not restarted.
    """
    if not tf.executing_eagerly():
        raise EagerModeError(
            "A TFKerasTrial runs in TensorFlow 2's eager mode, and this process disabled it: the trial's code calls "
            "tf.compat.v1.disable_eager_execution() or disable_v2_behavior() (remove the call; the harness runs the "
            "model's steps as tf.functions, as model.fit does), or an EstimatorTrial ran before in the same process "
            "(run the Keras trial in a process of its own)."
        )


def apply_session_config(config: tf.compat.v1.ConfigProto) -> None:
    """Applies what eager mode honours of a trial's ``session_config()``: thread pools and soft placement.

    Raises:
        TypeError: ``config`` is not a ``tf.compat.v1.ConfigProto``.
    """
    if not isinstance(config, tf.compat.v1.ConfigProto):
        raise TypeError(f"session_config() must return a tf.compat.v1.ConfigProto. Received: {type(config).__name__}")
    tf.config.set_soft_device_placement(config.allow_soft_placement)
    for size, setter, getter in (
        (
            config.intra_op_parallelism_threads,
            tf.config.threading.set_intra_op_parallelism_threads,
            tf.config.threading.get_intra_op_parallelism_threads,
        ),
        (
            config.inter_op_parallelism_threads,
            tf.config.threading.set_inter_op_parallelism_threads,
            tf.config.threading.get_inter_op_parallelism_threads,
        ),
    ):
        if size and size != getter():
            try:
                setter(size)
            except RuntimeError as error:  # TensorFlow already started in this process
                logger.warning("session_config() thread pool size not applied: %s", error)
