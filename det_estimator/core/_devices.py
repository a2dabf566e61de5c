"""One GPU per process: what a process on a machine shared with other workers sets before TensorFlow starts."""

import logging

logger = logging.getLogger("det_estimator.core")


def pin_local_gpu(local_rank: int) -> None:
    """Makes only this process's GPU (its local rank's) visible, growing its memory as needed; no-op without GPUs."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    gpu = gpus[local_rank % len(gpus)]
    try:
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as error:  # TensorFlow already started in this process (a trial run in the caller's)
        logger.warning("The GPUs were not pinned (one per process): %s", error)
