"""NumPy arrays as input: ``(x, y)`` or ``(x, y, sample_weights)``, batched, sharded and shuffled in tf.data.

The records are cut into batches of the per-slot batch size (the last one smaller when
the records do not divide evenly), epoch after epoch, each epoch's records in order or
shuffled from the trial seed and the epoch number. Batch ``k`` of that endless stream
is a function of ``k`` alone, so a resumed trial starts at any batch at no cost; the
indices are computed in the input pipeline, as ``model.fit`` does for arrays.
"""

import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator.errors import PermanentTrialError

_LAST_EPOCH = np.iinfo(np.int64).max


class DataError(PermanentTrialError, ValueError):
    """A data loader cannot be used as returned.

    Raised by the harness about what the trial returned, in no frame of the user's: the
    command shows its message alone.
    """


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
        structure = tuple(_as_arrays(part) for part in data)
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

        def batches_of_epoch(epoch: tf.Tensor) -> tf.data.Dataset:
            order = self._order(epoch, shuffle_seed)
            # The first batch of this epoch that is this process's: its own_first for the first epoch.
            start = tf.where(
                epoch == first_epoch,
                tf.constant(own_first - first_epoch * batches_per_epoch, tf.int64),
                tf.math.floormod(own_first - epoch * batches_per_epoch, size),
            )
            batches = tf.data.Dataset.range(start, batches_per_epoch, size)
            return batches.map(lambda batch: self._indices(order, batch, batch_size))

        indices = tf.data.Dataset.range(first_epoch, _LAST_EPOCH).flat_map(batches_of_epoch)
        return self._gathered(indices)

    def validation(self, batch_size: int, rank: int, size: int) -> tf.data.Dataset:
        """This process's share of one pass over the records: batches ``rank``, ``rank + size``, ... in order."""
        order = tf.range(self.num_records, dtype=tf.int64)
        batches = tf.data.Dataset.range(rank, math.ceil(self.num_records / batch_size), size)
        return self._gathered(batches.map(lambda batch: self._indices(order, batch, batch_size)))

    def _order(self, epoch: tf.Tensor, shuffle_seed: Optional[int]) -> tf.Tensor:
        if shuffle_seed is None:
            return tf.range(self.num_records, dtype=tf.int64)
        seed = tf.stack([tf.constant(shuffle_seed, tf.int64), epoch])
        return tf.cast(tf.argsort(tf.random.stateless_uniform([self.num_records], seed=seed)), tf.int64)

    def _indices(self, order: tf.Tensor, batch: tf.Tensor, batch_size: int) -> tf.Tensor:
        start = batch * batch_size
        return order[start : tf.minimum(start + batch_size, self.num_records)]

    def _gathered(self, indices: tf.data.Dataset) -> tf.data.Dataset:
        # The arrays travel as a dataset element rather than being captured by the
        # functions, which would copy them into every function's graph.
        arrays = tf.data.Dataset.from_tensors(self._tensors).repeat()
        batches = tf.data.Dataset.zip((indices, arrays)).map(
            lambda batch, data: tf.nest.map_structure(lambda array: tf.gather(array, batch), data),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return batches.prefetch(tf.data.AUTOTUNE)


def _as_arrays(structure: Any) -> Any:
    """Arrays (lists of arrays as tuples, dicts kept); floating point ones in Keras' float type, as model.fit does."""
    if isinstance(structure, (list, tuple)):
        return tuple(_as_arrays(item) for item in structure)
    if isinstance(structure, dict):
        return {key: _as_arrays(item) for key, item in structure.items()}
    array = np.asarray(structure)
    if array.ndim == 0:
        raise DataError(f"Each array must have one row per record. Received a scalar: {structure!r}")
    if array.dtype.kind == "f":
        array = array.astype(tf.keras.backend.floatx(), copy=False)
    return array
