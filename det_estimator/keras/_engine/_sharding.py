"""Which process reads which records or batches: a trial's streams, ``wrap_data``'s shares, and predictions back.

One rule throughout: unit ``k`` of the global order goes to process ``k % size``.

A trial's data (:class:`ArrayData`, :func:`sequence_plan`): the unit is a per-slot batch
of the harness's batched stream, epoch after epoch. NumPy arrays ``(x, y[, w])`` are cut
into batches of the per-slot batch size (the last one smaller when the records do not
divide evenly), each epoch's records in order or shuffled from the trial seed and the
epoch number; a Sequence's batches likewise, in order or shuffled. Batch ``k`` of that
endless stream is a function of ``k`` alone, so a resumed trial starts at any batch at
no cost; the indices are computed in the input pipeline, as ``model.fit`` does for arrays.

``context.wrap_data`` (:class:`Sharder`): process ``rank`` of ``size`` takes every
``size``-th element starting at its rank, round robin, as the Keras trial's
``wrap_dataset`` and validation Sequences do.

- Arrays ``(x, y[, w])`` are shared by record: record ``i`` goes to process
  ``i % size``. With ``batch_size = global_batch_size / size`` on every process, the
  records of global step ``k`` are then records ``k * global_batch_size`` to
  ``(k + 1) * global_batch_size - 1``, the very batch ``model.fit`` on one process
  with the global batch size reads, whatever the batch size: training on N
  processes follows the order of training on one.
- A ``keras.utils.Sequence`` is shared by batch: batch ``j`` of the Sequence goes to
  process ``j % size``.
- A ``tf.data.Dataset`` is shared by element with ``Dataset.shard`` (wrap it before
  batching, so that an element is a record).

Predictions made on a share are put back in the input's order by :func:`in_input_order`.

Under a strategy whose replicas span processes (MultiWorkerMirroredStrategy), each worker
trains, validates and predicts on its own share as its own batches (:func:`per_worker`,
:func:`per_worker_epochs`, :func:`per_worker_passes`, :func:`predict_locally`), not
sharded once more by ``fit``.
"""

import math
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator._dataset_lineage import DatasetShares
from det_estimator.core import DistributedContext
from det_estimator.keras._engine import _keras_compat
from det_estimator.keras._engine._sequences import DataError, Placement, as_batch, epoch_order

# What wrap_data() takes.
KINDS = "(x, y), (x, y, sample_weights), one array, a keras.utils.Sequence or a tf.data.Dataset"
_LAST_EPOCH = np.iinfo(np.int64).max


class ArrayData:
    """The arrays of a ``(x, y[, sample_weights])`` loader, checked, as tensors.

    Args:
        data: the tuple returned by the trial's builder.
        which: how error messages name the builder.

    Raises:
        DataError: the tuple has not 2 or 3 elements, no record, or arrays of different lengths.
    """

    def __init__(self, data: tuple, which: str) -> None:
        if not 2 <= len(data) <= 3:
            raise DataError(
                f"{which} must return (x, y) or (x, y, sample_weights) when it returns a tuple. "
                f"Received: a tuple of {len(data)} elements"
            )
        structure = tuple(_as_float_arrays(part) for part in data)
        lengths = {len(leaf) for leaf in tf.nest.flatten(structure)}
        if len(lengths) != 1:
            shapes = tf.nest.map_structure(lambda leaf: leaf.shape, structure)
            raise DataError(
                f"The arrays returned by {which} must all have one record per row. Received shapes: {shapes}"
            )
        (self.num_records,) = lengths
        if self.num_records == 0:
            raise DataError(f"The arrays returned by {which} hold no record.")
        self._tensors = tf.nest.map_structure(tf.convert_to_tensor, structure)

    def training(
        self, batch_size: int, rank: int, size: int, first: int, shuffle_seed: Optional[int]
    ) -> tf.data.Dataset:
        """This process's endless stream of batches, starting at batch ``first`` of the global stream.

        The process reads batches ``first + rank``, ``first + rank + size``, ... of the
        stream, so that the processes read consecutive batches and together the
        records of ``size`` batches per step.
        """
        batches_per_epoch = math.ceil(self.num_records / batch_size)
        own_first = first + rank
        first_epoch = own_first // batches_per_epoch

        def epoch_order(epoch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            # The first batch of this epoch that is this process's: its own_first for the first epoch.
            start = tf.where(
                epoch == first_epoch,
                tf.constant(own_first - first_epoch * batches_per_epoch, tf.int64),
                tf.math.floormod(own_first - epoch * batches_per_epoch, size),
            )
            return self._order(epoch, shuffle_seed), start

        # An epoch's order is drawn ahead of its first batch, as model.fit's own input of arrays does it.
        orders = tf.data.Dataset.range(first_epoch, _LAST_EPOCH).map(epoch_order).prefetch(1)
        indices = orders.flat_map(lambda order, start: self._batch_indices(order, batch_size, start, size))
        return self._gathered(indices)

    def validation(self, batch_size: int, rank: int, size: int) -> tf.data.Dataset:
        """This process's share of one pass over the records: batches ``rank``, ``rank + size``, ... in order."""
        order = tf.range(self.num_records, dtype=tf.int64)
        return self._gathered(self._batch_indices(order, batch_size, tf.constant(rank, tf.int64), size))

    def _order(self, epoch: tf.Tensor, shuffle_seed: Optional[int]) -> tf.Tensor:
        if shuffle_seed is None:
            return tf.range(self.num_records, dtype=tf.int64)
        seed = tf.stack([tf.constant(shuffle_seed, tf.int64), epoch])
        return tf.cast(tf.argsort(tf.random.stateless_uniform([self.num_records], seed=seed)), tf.int64)

    def _batch_indices(self, order: tf.Tensor, batch_size: int, start: tf.Tensor, size: int) -> tf.data.Dataset:
        """The record indices of batches ``start``, ``start + size``, ... of one epoch in ``order``, one batch each.

        As ``model.fit``'s own input of arrays cuts them: the whole batches are the rows
        of the order reshaped, sliced once per epoch, so that every batch is whole (of a
        static shape, for which the step is traced and runs faster) when the batch size
        divides the records; the smaller last batch follows when it is this process's.
        """
        whole = self.num_records // batch_size
        rows = tf.reshape(order[: whole * batch_size], [whole, batch_size])
        batches = tf.data.Dataset.from_tensor_slices(rows[start::size])
        if self.num_records % batch_size:
            # The last batch is batch number `whole`: this process's when it is `start` plus a multiple of `size`.
            mine = tf.logical_and(start <= whole, tf.math.floormod(whole - start, size) == 0)
            last = tf.data.Dataset.from_tensors(order[whole * batch_size :]).take(tf.cast(mine, tf.int64))
            batches = batches.concatenate(last)
        return batches

    def _gathered(self, indices: tf.data.Dataset) -> tf.data.Dataset:
        """The records of each batch of ``indices``, gathered in one parallel map, as ``model.fit``'s own input does."""
        # The arrays travel as a dataset element rather than being captured by the
        # function, which would copy them into its graph.
        arrays = tf.data.Dataset.from_tensors(self._tensors).repeat()

        def gathered(batch: tf.Tensor, data: Any) -> Any:
            return tf.nest.map_structure(lambda array: tf.gather(array, batch), data)

        batches = tf.data.Dataset.zip((indices, arrays)).map(
            gathered, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        return batches.prefetch(tf.data.AUTOTUNE)


def _as_float_arrays(structure: Any) -> Any:
    """Arrays (lists of arrays as tuples, dicts kept); floating point ones in Keras' float type, as model.fit does."""
    if isinstance(structure, (list, tuple)):
        return tuple(_as_float_arrays(item) for item in structure)
    if isinstance(structure, dict):
        return {key: _as_float_arrays(item) for key, item in structure.items()}
    array = np.asarray(structure)
    if array.ndim == 0:
        raise DataError(f"Each array must have one row per record. Received a scalar: {structure!r}")
    if array.dtype.kind == "f":
        array = array.astype(tf.keras.backend.floatx(), copy=False)
    return array


def sequence_plan(num_batches: int, first: int, size: int, shuffle_seed: Optional[int]) -> Iterator[Placement]:
    """Batches ``first``, ``first + size``, ... of the endless stream of a Sequence's epochs."""
    element = first
    epoch = element // num_batches
    order = epoch_order(num_batches, epoch, shuffle_seed)
    while True:
        if element // num_batches != epoch:
            epoch = element // num_batches
            order = epoch_order(num_batches, epoch, shuffle_seed)
        yield Placement(epoch, int(order[element % num_batches]))
        element += size


@dataclass(frozen=True)
class Share:
    """How one process's data was cut from the whole.

    Attributes:
        unit: ``"record"`` (arrays, datasets) or ``"batch"`` (Sequences): what goes round robin.
        rank: this process's rank.
        size: the number of processes.
        total: the number of units in the whole (None for a dataset, whose length may be unknown).
    """

    unit: str
    rank: int
    size: int
    total: Optional[int] = None


class ShardedSequence(tf.keras.utils.Sequence):
    """Batches ``rank``, ``rank + size``, ... of a Sequence; remembers each batch's size, to reorder predictions.

    Args:
        sequence: the whole Sequence.
        rank: this process's rank.
        size: the number of processes.
    """

    def __init__(self, sequence: tf.keras.utils.Sequence, rank: int, size: int) -> None:
        super().__init__()
        self.sequence = sequence
        self.share = Share("batch", rank, size, len(sequence))
        self._indices = range(rank, len(sequence), size)
        self._lock = threading.Lock()
        self.batch_sizes: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: int) -> Any:
        item = self.sequence[self._indices[index]]
        batch = as_batch(item, self._indices[index])
        with self._lock:
            self.batch_sizes[index] = _rows(tf.nest.flatten(batch[0])[0])
        return item

    def on_epoch_end(self) -> None:
        self.sequence.on_epoch_end()


class Sharder:
    """Cuts data into this process's share and remembers what it cut, to put predictions back in order.

    Args:
        distributed: this process's place in the job.
    """

    def __init__(self, distributed: DistributedContext) -> None:
        self._distributed = distributed
        # id(array) -> (weak reference, share): arrays cannot be dict keys, nor weak-keyed.
        self._arrays: dict[int, tuple[weakref.ref, Share]] = {}
        self._datasets = DatasetShares(distributed.rank, distributed.size)

    def wrap(self, *data: Any) -> Any:
        """This process's share of ``data``; see :meth:`KerasContext.wrap_data`."""
        if not data:
            raise TypeError(f"wrap_data() takes {KINDS}. Received: nothing")
        first = data[0]
        if len(data) == 1 and isinstance(first, tf.data.Dataset):
            return self._wrap_dataset(first)
        if len(data) == 1 and isinstance(first, tf.keras.utils.Sequence):
            return self._wrap_sequence(first)
        if isinstance(first, (tf.data.Dataset, tf.keras.utils.Sequence)):
            raise TypeError(
                f"wrap_data() takes a {type(first).__name__} alone, like model.fit(x=...). "
                f"Received: {len(data)} arguments"
            )
        if len(data) > 3:
            raise TypeError(f"wrap_data() takes {KINDS}. Received: {len(data)} arguments")
        return self._wrap_arrays(data)

    def _wrap_dataset(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        return self._datasets.share_of(dataset)

    def _wrap_sequence(self, sequence: tf.keras.utils.Sequence) -> tf.keras.utils.Sequence:
        if self._distributed.size == 1:
            return sequence
        if len(sequence) < self._distributed.size:
            raise ValueError(
                f"A Sequence of {len(sequence)} batches cannot be shared by {self._distributed.size} processes: "
                "each needs at least one batch. Use smaller batches."
            )
        return ShardedSequence(sequence, self._distributed.rank, self._distributed.size)

    def _wrap_arrays(self, data: tuple) -> Any:
        structure = tuple(_as_arrays(part) for part in data)
        leaves = tf.nest.flatten(structure)
        lengths = {len(leaf) for leaf in leaves}
        if len(lengths) != 1:
            shapes = tf.nest.map_structure(lambda leaf: leaf.shape, structure)
            raise ValueError(f"The arrays given to wrap_data() must all have one record per row. Received: {shapes}")
        (total,) = lengths
        rank, size = self._distributed.rank, self._distributed.size
        if total < size:
            raise ValueError(f"wrap_data() got {total} records for {size} processes: each needs at least one record.")
        if size > 1:
            structure = tf.nest.map_structure(lambda leaf: leaf[rank::size], structure)
        share = Share("record", rank, size, total)
        for leaf in tf.nest.flatten(structure):
            self._arrays[id(leaf)] = (weakref.ref(leaf), share)
        return structure if len(structure) > 1 else structure[0]

    def share_of(self, data: Any) -> Optional[Share]:
        """How ``data`` (an array or structure of arrays, a Sequence or a Dataset) was cut; None if it was not."""
        if isinstance(data, ShardedSequence):
            return data.share
        if isinstance(data, tf.data.Dataset):
            return Share("record", self._distributed.rank, self._distributed.size) if self._derived(data) else None
        leaves = tf.nest.flatten(data) if data is not None else []
        if not leaves:
            return None
        entry = self._arrays.get(id(leaves[0]))
        if entry is None or entry[0]() is not leaves[0]:
            return None
        return entry[1]

    def _derived(self, dataset: tf.data.Dataset) -> bool:
        """Whether ``dataset`` was built from one :meth:`wrap` returned (batched, mapped, ...)."""
        return self._datasets.handed_out(dataset)


def in_input_order(
    predictions: Any, share: Share, distributed: DistributedContext, batch_sizes: Optional[list[int]] = None
) -> Any:
    """Every process's predictions on its share, put back in the order of the whole input, on every process.

    Args:
        predictions: this process's predictions (an array, or a list or dict of arrays
            for a model with several outputs), in its share's order.
        share: how the share was cut.
        distributed: this process's place in the job (every process must call this).
        batch_sizes: for a Sequence's share, the size of each of its batches in order.

    Returns:
        The predictions of the whole input, in its order.
    """
    leaves = [np.asarray(leaf) for leaf in tf.nest.flatten(predictions)]
    gathered = distributed.allgather((leaves, batch_sizes))
    merged = []
    for position in range(len(leaves)):
        parts = [process_leaves[position] for process_leaves, _ in gathered]
        if share.unit == "record":
            merged.append(_interleave_records(parts))
        else:
            merged.append(_interleave_batches(parts, [sizes for _, sizes in gathered]))
    return tf.nest.pack_sequence_as(predictions, merged)


def _interleave_records(parts: list[np.ndarray]) -> np.ndarray:
    """Record ``i`` of the whole is record ``i // size`` of process ``i % size``."""
    size = len(parts)
    total = sum(len(part) for part in parts)
    whole = np.empty((total, *parts[0].shape[1:]), dtype=np.result_type(*parts))
    for rank, part in enumerate(parts):
        whole[rank::size] = part
    return whole


def _interleave_batches(parts: list[np.ndarray], sizes: list[list[int]]) -> np.ndarray:
    """Batch ``j`` of the whole is batch ``j // size`` of process ``j % size``."""
    pieces = []
    for rank, (part, batch_sizes) in enumerate(zip(parts, sizes)):
        bounds = np.cumsum([0, *batch_sizes])
        if bounds[-1] != len(part):
            raise ValueError(
                f"Process {rank} predicted {len(part)} records for batches of {bounds[-1]} records in all: "
                "the Sequence's batches changed size between reads."
            )
        pieces.append([part[bounds[i] : bounds[i + 1]] for i in range(len(batch_sizes))])
    ordered = []
    for index in range(max(len(batches) for batches in pieces)):
        for batches in pieces:
            if index < len(batches):
                ordered.append(batches[index])
    return np.concatenate(ordered) if ordered else parts[0][:0]


def _as_arrays(structure: Any) -> Any:
    """NumPy arrays, in the structure given (lists as tuples, dicts kept)."""
    if isinstance(structure, (list, tuple)):
        return tuple(_as_arrays(item) for item in structure)
    if isinstance(structure, dict):
        return {key: _as_arrays(item) for key, item in structure.items()}
    array = np.asarray(structure)
    if array.ndim == 0:
        raise ValueError(f"wrap_data() takes arrays with one row per record. Received a scalar: {structure!r}")
    return array


def _rows(leaf: Any) -> int:
    shape = getattr(leaf, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else len(leaf)


def per_worker(model: tf.keras.Model, dataset: Any, like: Optional[Any] = None) -> Any:
    """``dataset`` as this worker's own batches under a strategy spanning processes: not sharded, not rebatched.

    ``fit`` and ``evaluate`` would otherwise shard a process's share once more and split
    its batches over the replicas. A worker whose share ends first goes on with empty
    batches, made from the dataset's element spec: ``like``, a batch of the data, gives
    their other dimensions where the spec leaves them unknown (a Sequence's batches).
    Any other strategy (one process): ``dataset`` itself.
    """
    strategy = model.distribute_strategy
    if not isinstance(dataset, tf.data.Dataset) or not _keras_compat.spans_workers(strategy):
        return dataset
    if like is not None:
        shapes = tf.nest.map_structure(
            lambda leaf: tf.TensorShape([None]).concatenate(tf.convert_to_tensor(leaf).shape[1:]), tuple(like)
        )

        def with_known_dimensions(*batch: Any) -> Any:
            batch = tf.nest.map_structure(tf.ensure_shape, batch, shapes[: len(batch)])
            return batch if len(batch) > 1 else batch[0]

        dataset = dataset.map(with_known_dimensions)
    return strategy.distribute_datasets_from_function(lambda _: dataset)


def per_worker_epochs(
    model: tf.keras.Model, dataset: tf.data.Dataset, steps: Optional[int]
) -> tuple[Any, Optional[int]]:
    """A worker's own training batches for ``fit``'s epochs: ``(data, steps_per_epoch)`` to give ``fit``.

    Under a strategy spanning processes, ``dataset`` (one pass of ``steps`` batches, as
    many on every worker) becomes this worker's own batches (:func:`per_worker`). Keras 3
    reads a distributed dataset of known length afresh each epoch: it is given as it is.
    Keras 2 runs a distributed dataset only for a number of steps, through one iterator
    over every epoch: it is repeated, each epoch one pass. Any other strategy: ``dataset``
    as it is, and no steps.
    """
    if not _keras_compat.spans_workers(model.distribute_strategy):
        return dataset, None
    if _keras_compat.KERAS_3:
        return per_worker(model, dataset), None
    return per_worker(model, dataset.repeat()), steps


def per_worker_passes(model: tf.keras.Model, dataset: tf.data.Dataset, longest: int) -> tuple[Any, Optional[int]]:
    """A worker's own validation batches: ``(data, steps)`` to give ``fit`` (``validation_steps``) or ``evaluate``.

    Under a strategy spanning processes every step is a collective: every worker runs
    until the longest share (``longest`` batches) ends, a worker whose share ended first
    going on with empty batches (see :func:`per_worker`). Keras 3 is given a length it
    cannot know, and so reads each pass to its end, the longest share's (told a known
    length, it would stop each worker at its own share's). Keras 2 runs a distributed
    dataset only for a number of steps: the longest share's. Any other strategy:
    ``dataset`` as it is, and no steps.
    """
    if not _keras_compat.spans_workers(model.distribute_strategy):
        return dataset, None
    if _keras_compat.KERAS_3:
        return per_worker(model, dataset.filter(lambda *batch: True)), None
    return per_worker(model, dataset), longest


def predict_locally(model: tf.keras.Model, x: Any, batch_size: Optional[int] = None) -> Any:
    """This worker's predictions of ``x`` alone, under a strategy spanning processes: no collective.

    ``predict`` there would shard ``x`` over the workers once more and gather every
    worker's outputs. The model is called on each batch of ``x`` (arrays, in batches of
    ``batch_size``, Keras' default 32; or a dataset of batches, whose first element is
    the input), reading its variables as this worker holds them, and the outputs are
    concatenated as ``predict`` concatenates them.
    """
    if isinstance(x, tf.data.Dataset):
        batches = x.map(lambda *element: element[0]) if isinstance(x.element_spec, tuple) else x
    else:
        batches = tf.data.Dataset.from_tensor_slices(x).batch(batch_size or 32)
    outputs = [tf.nest.map_structure(lambda tensor: tensor.numpy(), model(batch, training=False)) for batch in batches]
    return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *outputs)
