"""ReducerMetric: a Keras metric computed by a MetricReducer over the data of every process."""

import re
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator import _horovod
from det_estimator.core._distributed import current_context
from det_estimator.reducers import MetricReducer
from det_estimator.reducers._accumulator import MetricAccumulator
from det_estimator.reducers._roc_auc import _ScoreRankingReducer

# Rows handed over from the queue of batches at a time, about (see _ColumnQueue.take).
_GROUP_ROWS = 1 << 20


@tf.keras.utils.register_keras_serializable(package="det_estimator")
class ReducerMetric(tf.keras.metrics.Metric):
    """A Keras metric whose value is computed by a ``MetricReducer`` over every process's data.

    Each batch's ``{"labels": y_true, "predictions": y_pred, "weights": sample_weight}``
    (``weights`` only when there are sample weights) goes to the reducer's ``accumulate`` on
    this process. For ``RocAuc`` and ``AveragePrecision``, whose state is the examples
    themselves, the batches are instead appended to a queue inside Keras' compiled step (one
    enqueue op, no Python per batch) and handed to ``accumulate`` in a few large batches
    (each run of batches of one size in one) when the value is read, also under a
    ``tf.distribute`` strategy of one device per process (a ``MultiWorkerMirroredStrategy``
    on CPUs or one GPU per worker); under a strategy over several devices of a process, and
    for other reducers, each batch calls ``accumulate`` from the step. When Keras reads the
    metric's value at the end of ``model.evaluate`` (or of an epoch of ``model.fit``, or of
    a workload and of a validation in a ``TFKerasTrial``), the processes exchange their
    states in one Horovod allgather (under a ``MultiWorkerMirroredStrategy``, through the
    job's ``det.core`` distributed context) and every process gets the reducer's
    ``cross_slot_reduce`` of all of them. With ``RocAuc`` the value equals
    ``sklearn.metrics.roc_auc_score`` on the union of every process's data, however unevenly
    it is split; Keras' own ``tf.keras.metrics.AUC`` is binned, and averaging it per process
    is wrong again. On one process, or with neither Horovod nor a ``det.core`` context of
    several processes, the local state is reduced directly.

    It works in ``model.compile(metrics=[...])``, ``weighted_metrics`` and
    ``model.evaluate``, in a trial or in a plain Keras script (run under horovodrun
    with ``horovod.tensorflow`` initialized for several processes). Every evaluation
    starts from a fresh ``copy.deepcopy`` of ``reducer``.

    The value is computed when Keras reads it eagerly, at the end; the per-batch values
    Keras computes inside its compiled step functions (progress bars, batch logs) are
    NaN. So on several processes, do not compile the model with ``run_eagerly=True``:
    every process would have to read it after each of its batches, in step with the
    others. For the same reason every process must evaluate, even one without data:
    Keras refuses empty arrays, so give such a process an empty ``tf.data.Dataset`` of
    unknown length (a filtered one); a ``TFKerasTrial`` does this by itself.

    Args:
        reducer: the reducer, such as ``det_estimator.reducers.RocAuc()``.
        name: the metric's name in logs (``val_<name>`` in a trial's validation
            metrics); default: the reducer's class name in snake case.
        dtype: the dtype of the value; float64 by default, so that exact values stay
            exact.
        **kwargs: passed to ``tf.keras.metrics.Metric``.

    Raises:
        TypeError: ``reducer`` is not a ``MetricReducer``, or ``copy.deepcopy`` cannot copy it.

    Example:
        ::

            from det_estimator.reducers import RocAuc

            model.compile(
                optimizer,
                loss="binary_crossentropy",
                metrics=[det.keras.ReducerMetric(RocAuc(), name="auc")],
            )
    """

    def __init__(
        self, reducer: MetricReducer, name: Optional[str] = None, dtype: Any = tf.float64, **kwargs: Any
    ) -> None:
        if not isinstance(reducer, MetricReducer):
            raise TypeError(
                "Argument `reducer` must be a MetricReducer instance (e.g. det_estimator.reducers.RocAuc()). "
                f"Received: reducer={reducer!r}"
            )
        super().__init__(name=name or _snake_case(type(reducer).__name__), dtype=dtype, **kwargs)
        self._prototype = reducer
        self._accumulator = MetricAccumulator(reducer, name=self.name, rank=_rank())
        self._value: Optional[np.ndarray] = None
        # The queue of the batches' columns, created on the first batch, when their dtypes are
        # known. A plain object holding no variables, so that Keras tracks none of this metric
        # (it would sum them across processes, and save them with the model).
        self._queue: Optional[_ColumnQueue] = None
        self._collective_name = "det_reducer_metric." + re.sub(r"[^A-Za-z0-9_.-]", "_", self.name)

    @property
    def reducer(self) -> MetricReducer:
        """The reducer every evaluation copies."""
        return self._prototype

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Optional[Any] = None) -> Any:
        """Adds one batch to this process's state: appended to the queue, or an op calling ``accumulate``."""
        inputs = {"labels": y_true, "predictions": y_pred}
        if sample_weight is not None:
            inputs["weights"] = sample_weight
        if isinstance(self._prototype, _ScoreRankingReducer) and _one_replica_per_process():
            columns = {key: tf.convert_to_tensor(value) for key, value in inputs.items()}
            if self._queue is None:
                with tf.init_scope():
                    self._queue = _ColumnQueue({key: column.dtype for key, column in columns.items()})
            # The queue holds the columns and dtypes of the first batch: a batch of other dtypes or
            # columns (another evaluate's labels) calls accumulate instead.
            if self._queue.holds(columns):
                return self._queue.append(columns)
        keys = sorted(inputs)

        def accumulate(*arrays: np.ndarray) -> np.int64:
            self._value = None
            return np.int64(self._accumulator.accumulate(dict(zip(keys, arrays))))

        return tf.numpy_function(accumulate, [inputs[key] for key in keys], tf.int64, stateful=True)

    @tf.autograph.experimental.do_not_convert  # plain Python: its errors reach the caller as they are
    def result(self) -> tf.Tensor:
        """The value over every process's batches since the last reset (NaN inside compiled step functions)."""
        if not tf.executing_eagerly():
            return tf.constant(np.nan, dtype=self.dtype)
        self._take_queued()
        if self._value is None:
            self._value = self._reduce()
        return tf.constant(self._value, dtype=self.dtype)

    def _take_queued(self) -> None:
        """Hands the rows queued since the last read to the reducer, in as few batches as it can."""
        if self._queue is None:
            return
        for block in self._queue.take():
            self._accumulator.accumulate(block)
            self._value = None

    def reset_state(self) -> None:
        """Starts a new evaluation: the next batches go to a fresh copy of the reducer."""
        self._accumulator = MetricAccumulator(self._prototype, name=self.name, rank=_rank())
        self._value = None
        if self._queue is not None:
            self._queue.clear()

    def get_config(self) -> dict[str, Any]:
        """The metric's config, with the reducer as JSON when it has a ``get_config()``.

        The built-in reducers have one, so a model compiled with them can be saved with
        ``model.save`` and loaded back; another reducer stays in the config as the
        object itself, which Keras can copy (as it does for each output of a model)
        but not save.
        """
        reducer: Any = self._prototype
        if callable(getattr(reducer, "get_config", None)):
            reducer = {"class_name": type(reducer).__name__, "config": reducer.get_config()}
        return {**super().get_config(), "reducer": reducer}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ReducerMetric":
        """The metric of a config from :meth:`get_config`; a reducer of your own needs ``custom_objects``."""
        config = dict(config)
        reducer = config.pop("reducer")
        if isinstance(reducer, dict):
            reducer = _reducer_from_config(reducer)
        return cls(reducer, **config)

    def _reduce(self) -> np.ndarray:
        # A fresh accumulator reduces, so that this one keeps its state if Keras goes on
        # accumulating before the next reset.
        combiner = MetricAccumulator(self._prototype, name=self.name, rank=_rank())
        if _horovod.is_distributed():
            local = tf.constant(np.frombuffer(self._accumulator.encode(), dtype=np.uint8))
            all_bytes, sizes = _horovod.allgather_bytes(local, name=self._collective_name)
            return combiner.reduce_encoded(all_bytes.numpy(), sizes.numpy(), np.dtype(self.dtype))
        distributed = current_context()
        if distributed is not None:
            # Workers of a tf.distribute strategy: Keras reads the metric on every one, in the same order.
            envelopes = distributed.allgather(self._accumulator.local_envelope())
            return combiner.reduce(envelopes, np.dtype(self.dtype))
        return combiner.reduce([self._accumulator.local_envelope()], np.dtype(self.dtype))


class _ColumnQueue:
    """A queue of batches' flattened columns (labels, predictions, weights), appended to inside a compiled step.

    Appending a batch is one enqueue of its columns and their sizes: no Python, no
    capacity to check or grow (a variable that grows needs a ``tf.cond`` in every step,
    which costs more than the rest of the step's appending). The queue keeps each
    batch's tensors as they are until ``take`` dequeues them. Each column keeps its own
    sizes: a batch whose columns differ in size is handed over on its own, and the
    reducer's checks reject it.

    Args:
        dtypes: each column's name and dtype.
    """

    def __init__(self, dtypes: dict[str, tf.DType]) -> None:
        self._dtypes = dict(dtypes)
        # Unbounded (capacity -1): an enqueue never waits. Padded: a dequeue of several batches
        # pads each column to its longest batch, and the sizes say how much of each row is data.
        self._queue = tf.queue.PaddingFIFOQueue(
            -1, [*self._dtypes.values(), tf.int64], shapes=[[None]] * len(self._dtypes) + [[len(self._dtypes)]]
        )

    def holds(self, columns: dict[str, tf.Tensor]) -> bool:
        """Whether these are the columns, of the dtypes, that the queue holds."""
        return {key: column.dtype for key, column in columns.items()} == self._dtypes

    def append(self, columns: dict[str, tf.Tensor]) -> tf.Operation:
        """The op appending a batch's columns (those, of the dtypes, given to the constructor)."""
        flat = [tf.reshape(columns[key], [-1]) for key in self._dtypes]
        sizes = tf.stack([tf.size(column, out_type=tf.int64) for column in flat])
        return self._queue.enqueue([*flat, sizes])

    def take(self) -> list[dict[str, np.ndarray]]:
        """The batches appended since the last ``take`` or ``clear``, in order, as few blocks of rows as it can.

        Consecutive batches whose columns all have the padded width (Keras' batches but
        the last) are one block of views of the dequeued rows, not copied again; any other
        batch is a block of its own. Then the queue is empty.
        """
        blocks: list[dict[str, np.ndarray]] = []
        widest = 1
        while (queued := int(self._queue.size())) > 0:
            # About _GROUP_ROWS rows at a time, so that a few long batches among short ones pad little.
            group = min(queued, max(1, _GROUP_ROWS // widest))
            *padded, sizes = (tensor.numpy() for tensor in self._queue.dequeue_many(group))
            widths = [rows.shape[1] for rows in padded]
            widest = max(widest, *widths)
            full = np.all(sizes == widths, axis=1).tolist()
            start = 0
            while start < group:
                stop = start + 1
                if full[start]:
                    while stop < group and full[stop]:
                        stop += 1
                    blocks.append({key: rows[start:stop].reshape(-1) for key, rows in zip(self._dtypes, padded)})
                else:
                    row_sizes = sizes[start]
                    blocks.append(
                        {
                            key: rows[start, : row_sizes[index]]
                            for index, (key, rows) in enumerate(zip(self._dtypes, padded))
                        }
                    )
                start = stop
        return blocks

    def clear(self) -> None:
        """Forgets the batches appended since the last ``take``."""
        self.take()


def _one_replica_per_process() -> bool:
    """Whether this process runs a single replica: no ``tf.distribute`` strategy, or one over a device per worker.

    Then one step's batch is this process's, whatever the strategy: a MultiWorkerMirroredStrategy
    (one device per worker) enqueues each worker's batches in its own process, and the values are
    exchanged when read. Replicas on several devices of a process would trace the step on
    threads of their own, each of them creating the queue on the first batch.
    """
    return not tf.distribute.has_strategy() or len(tf.distribute.get_strategy().extended.worker_devices) == 1


def _rank() -> int:
    """This process's rank among those the metric is reduced over."""
    distributed = None if _horovod.is_distributed() else current_context()
    return _horovod.rank() if distributed is None else distributed.rank


def _reducer_from_config(described: dict[str, Any]) -> MetricReducer:
    from det_estimator import reducers

    name = described.get("class_name")
    found = getattr(reducers, name, None) if name in reducers.__all__ else None
    reducer_class = found or tf.keras.utils.get_registered_object(name)
    if not (isinstance(reducer_class, type) and issubclass(reducer_class, MetricReducer)):
        raise ValueError(
            f"ReducerMetric: the saved reducer {name!r} is not a reducer of det_estimator.reducers. "
            f"Pass its class when loading: custom_objects={{{name!r}: {name}}}."
        )
    return reducer_class(**described.get("config", {}))


def _snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
