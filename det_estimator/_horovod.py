"""The one place det-estimator talks to Horovod.

Nothing else in the package imports ``horovod.tensorflow``: a single-process run never
loads Horovod's ops, and tests of the single-process paths need no Horovod at all.
A run counts as distributed once Horovod has been initialized with more than one process.
"""

import sys

import tensorflow as tf

_HOROVOD_MODULE = "horovod.tensorflow"


def _initialized_horovod():
    """Returns ``horovod.tensorflow`` if something in this process initialized it, else None."""
    hvd = sys.modules.get(_HOROVOD_MODULE)
    if hvd is None or not hvd.is_initialized():
        return None
    return hvd


def init() -> None:
    """Initializes Horovod for this process (a no-op if it already is)."""
    import horovod.tensorflow as hvd

    hvd.init()


def size() -> int:
    """Number of processes in the job; 1 when Horovod is not in use."""
    hvd = _initialized_horovod()
    return 1 if hvd is None else hvd.size()


def rank() -> int:
    """This process's rank in the job; 0 when Horovod is not in use."""
    hvd = _initialized_horovod()
    return 0 if hvd is None else hvd.rank()


def is_distributed() -> bool:
    """Whether collective operations are needed to combine results across processes."""
    return size() > 1


def allgather_bytes(local_bytes: tf.Tensor, name: str) -> tuple[tf.Tensor, tf.Tensor]:
    """Graph ops that gather a 1-D uint8 tensor of any length from every rank.

    Horovod pairs collectives across ranks by name, so ``name`` must be the same on every
    rank for the same logical value and differ between values.

    Args:
        local_bytes: this rank's bytes, a 1-D ``tf.uint8`` tensor.
        name: the collective's name, identical on every rank.

    Returns:
        ``(all_bytes, sizes)``: every rank's bytes concatenated in rank order, and the
        length each rank contributed (``tf.int64``, one entry per rank).
    """
    hvd = _initialized_horovod()
    if hvd is None:
        raise RuntimeError("allgather_bytes needs Horovod to be initialized (call hvd.init() first)")
    local_size = tf.reshape(tf.size(local_bytes, out_type=tf.int64), [1])
    sizes = hvd.allgather(local_size, name=f"{name}_sizes")
    all_bytes = hvd.allgather(local_bytes, name=f"{name}_bytes")
    return all_bytes, sizes
