"""What the process must set before TensorFlow starts: eager mode, one GPU per process, the session config's pools."""

import logging

import tensorflow as tf

from det_estimator.core._devices import pin_local_gpu
from det_estimator.errors import DetEstimatorError

logger = logging.getLogger("det_estimator.keras")

__all__ = ["apply_session_config", "pin_local_gpu", "require_eager"]


def require_eager() -> None:
    """Checks that TensorFlow 2's eager mode is on, which Keras trials need.

    Raises:
        DetEstimatorError: eager execution or V2 behaviour was disabled in this process.
    """
    if not tf.executing_eagerly():
        raise DetEstimatorError(
            "A TFKerasTrial runs in TensorFlow 2's eager mode, and this process disabled it "
            "(tf.compat.v1.disable_eager_execution() or disable_v2_behavior(), perhaps by running an EstimatorTrial "
            "before in the same process). Run the Keras trial in a process of its own."
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
