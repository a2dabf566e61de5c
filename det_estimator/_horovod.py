"""The one place det-estimator talks to Horovod.

Nothing else in the package imports ``horovod.tensorflow``: a single-process run never
loads Horovod's ops, and tests of the single-process paths need no Horovod at all.
A run counts as distributed once Horovod has been initialized with more than one process.
"""

import sys
from typing import Any

import tensorflow as tf

_HOROVOD_MODULE = "horovod.tensorflow"


def _initialized_horovod():
    """Returns ``horovod.tensorflow`` if something in this process initialized it, else None."""
    hvd = sys.modules.get(_HOROVOD_MODULE)
    if hvd is None or not hvd.is_initialized():
        return None
    return hvd


def init() -> Any:
    """Initializes Horovod for this process (a no-op if it already is); returns the module."""
    import horovod.tensorflow as hvd

    hvd.init()
    return hvd


def size() -> int:
    """Number of processes in the job; 1 when Horovod is not in use."""
    hvd = _initialized_horovod()
    return 1 if hvd is None else hvd.size()


def rank() -> int:
    """This process's rank in the job; 0 when Horovod is not in use."""
    hvd = _initialized_horovod()
    return 0 if hvd is None else hvd.rank()


def local_rank() -> int:
    """This process's rank among the processes on its machine; 0 without Horovod."""
    hvd = _initialized_horovod()
    return 0 if hvd is None else hvd.local_rank()


def local_size() -> int:
    """Number of processes on this machine; 1 without Horovod."""
    hvd = _initialized_horovod()
    return 1 if hvd is None else hvd.local_size()


def cross_rank() -> int:
    """The index of this machine among the job's machines; 0 without Horovod."""
    hvd = _initialized_horovod()
    return 0 if hvd is None else hvd.cross_rank()


def cross_size() -> int:
    """Number of machines in the job; 1 without Horovod."""
    hvd = _initialized_horovod()
    return 1 if hvd is None else hvd.cross_size()


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


def distributed_optimizer(
    optimizer: Any, aggregation_frequency: int, average_aggregated_gradients: bool, gradient_compression: bool
) -> Any:
    """``optimizer`` wrapped so that its gradients are averaged over all ranks."""
    import horovod.tensorflow as hvd

    # Users wrap their optimizer in build_estimator, which TF2 runs eagerly, and Horovod
    # refuses gradient aggregation for a v1 optimizer built eagerly. The wrapper is only
    # ever used inside the Estimator's graph and creates its aggregation state there, so
    # it is built in graph mode.
    with tf.Graph().as_default():
        return hvd.DistributedOptimizer(
            optimizer,
            backward_passes_per_step=aggregation_frequency,
            average_aggregated_gradients=average_aggregated_gradients,
            compression=hvd.Compression.fp16 if gradient_compression else hvd.Compression.none,
        )


def broadcast_variables_hook(root_rank: int = 0) -> Any:
    """A SessionRunHook that copies ``root_rank``'s initial variables to every rank."""
    import horovod.tensorflow as hvd

    return hvd.BroadcastGlobalVariablesHook(root_rank)


def allreduce_sum(tensor: tf.Tensor, name: str) -> tf.Tensor:
    """A graph op: the sum of ``tensor`` over all ranks."""
    import horovod.tensorflow as hvd

    return hvd.allreduce(tensor, op=hvd.Sum, name=name)


def keras_distributed_optimizer(
    optimizer: Any, aggregation_frequency: int, average_aggregated_gradients: bool, gradient_compression: bool
) -> Any:
    """A Keras optimizer like ``optimizer`` whose gradients are averaged over all ranks.

    Horovod builds a new optimizer of a subclass of ``optimizer``'s class (of the same
    name) from its config, so its variables are those of a fresh ``optimizer``.
    """
    import horovod.tensorflow.keras as hvd_keras

    distributed = hvd_keras.DistributedOptimizer(
        optimizer,
        backward_passes_per_step=aggregation_frequency,
        average_aggregated_gradients=average_aggregated_gradients,
        compression=hvd_keras.Compression.fp16 if gradient_compression else hvd_keras.Compression.none,
    )
    _average_applied_gradients(distributed)
    return distributed


def _average_applied_gradients(optimizer: Any) -> None:
    """Makes a Horovod Keras optimizer average the gradients given to ``apply_gradients`` too.

    Horovod averages them in ``compute_gradients``, which ``minimize`` (and so Keras'
    default train step) calls. A custom ``train_step`` written as Keras' guide writes it
    takes ``tape.gradient`` and calls ``apply_gradients``, which Horovod leaves to Keras:
    each process would apply its own gradients and the processes' weights drift apart.
    Gradients that did not come through ``compute_gradients`` are averaged on the way in,
    as ``compute_gradients`` does them (so ``aggregation_frequency`` holds too), in
    ``apply_gradients`` or, when a ``LossScaleOptimizer`` wraps this one, in the
    aggregation it asks for before it checks that the gradients are finite: every
    process then takes the same decision to apply them or skip the step.

    Horovod's class calls its parents through ``super(self.__class__, self)``, so it
    cannot be subclassed: the methods are replaced on the instance.
    """
    allreduce = optimizer._allreduce
    apply_gradients = optimizer.apply_gradients
    # Keras' hook for averaging over replicas: apply_gradients calls it unless told the
    # gradients were aggregated already (as a LossScaleOptimizer tells its inner one).
    legacy = isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer)
    hook = "_aggregate_gradients" if legacy else "aggregate_gradients"
    aggregate = getattr(optimizer, hook)
    # Whether the gradients of the step being traced (or run eagerly) were averaged:
    # set by compute_gradients' allreduce, cleared once they are aggregated or applied.
    averaged = [False]

    def allreduce_noted(grads: Any, variables: Any) -> Any:
        averaged[0] = True
        return allreduce(grads, variables)

    def averaged_pairs(grads_and_vars: Any) -> list:
        grads, variables = zip(*grads_and_vars)
        return list(zip(allreduce_noted(grads, variables), variables))

    def aggregate_averaged(grads_and_vars: Any) -> Any:
        grads_and_vars = list(grads_and_vars)
        if not averaged[0]:
            grads_and_vars = averaged_pairs(grads_and_vars)
        averaged[0] = False
        return aggregate(grads_and_vars)

    def apply_averaged_gradients(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        skipped = kwargs.get("skip_gradients_aggregation", False)
        aggregated = skipped or not kwargs.get("experimental_aggregate_gradients", True)
        if not aggregated and not averaged[0]:
            grads_and_vars = averaged_pairs(grads_and_vars)
        try:
            return apply_gradients(grads_and_vars, *args, **kwargs)
        finally:
            averaged[0] = False

    # Without Keras' attribute tracking: they are not part of the optimizer's state.
    object.__setattr__(optimizer, "_allreduce", allreduce_noted)
    object.__setattr__(optimizer, hook, aggregate_averaged)
    object.__setattr__(optimizer, "apply_gradients", apply_averaged_gradients)
