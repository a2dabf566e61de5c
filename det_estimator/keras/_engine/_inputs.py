"""The five kinds of input as this process's tf.data pipelines: training resumable at any batch, validation counted.

Every kind becomes a ``tf.data.Dataset`` of batches:

- NumPy arrays ``(x, y[, w])`` and Sequences (plain or in a
  :class:`SequenceAdapter`) are cut into one endless stream of per-process batches,
  epoch after epoch; process ``rank`` of ``size`` reads batches ``rank``,
  ``rank + size``, ... of it, so the processes share every epoch. Batch ``k`` of the
  stream depends on ``k`` alone (and the trial seed, when shuffling), so a resumed trial
  starts at the batch where it stopped by its number.
- A ``tf.data.Dataset`` is the trial's own pipeline, sharded by ``wrap_dataset`` and
  repeated; its iterator's state (buffers and all) is saved with every checkpoint, so a
  resume costs the same at any position.
"""

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Callable, Optional, Union

import tensorflow as tf

from det_estimator.keras._context import TFKerasTrialContext
from det_estimator.keras._engine._position import Addressable, IteratorState, Resumed
from det_estimator.keras._engine._sequences import BatchReader, DataError, Placement, SequenceAdapter, signature_of
from det_estimator.keras._engine._sharding import ArrayData, sequence_plan

logger = logging.getLogger("det_estimator.keras")

KINDS = "(x, y), (x, y, sample_weights), a tf.data.Dataset, a keras.utils.Sequence or a det.keras.SequenceAdapter"


class DataTypeError(DataError, TypeError):
    """A data loader returned something of none of the kinds the harness takes."""


class TrainingData:
    """This process's endless training batches, which start at any batch of the trial.

    Args:
        make_dataset: builds the pipeline from the global stream position (NumPy and
            Sequences) or regardless of it (tf.data).
        rank: this process's rank.
        saves_iterator: the position is the iterator's state (tf.data), saved per process.
        reader: the Sequence reader to stop at the end, if any.
        first_batch: a batch of the data, to build the model with before training
            (Sequences, whose batches' shapes are unknown to tf.data).
    """

    def __init__(
        self,
        make_dataset: Callable[[int], tf.data.Dataset],
        rank: int,
        saves_iterator: bool = False,
        reader: Optional[BatchReader] = None,
        first_batch: Optional[tuple] = None,
    ) -> None:
        self._make_dataset = make_dataset
        self._saves_iterator = saves_iterator
        self._resumed = IteratorState(rank) if saves_iterator else Addressable()
        self._reader = reader
        self.first_batch = first_batch

    @property
    def saves_iterator(self) -> bool:
        """Whether the position is the iterator's state (tf.data), saved in every checkpoint."""
        return self._saves_iterator

    def stream(self, position: int, batches: int, saved: Optional[tuple[Path, int]], size: int) -> Resumed:
        """The dataset of this run's batches, for ``model.fit``, and what restores its first iterator, if anything.

        Args:
            position: batches of the global stream read by all processes before this run.
            batches: batches this process trained before this run.
            saved: the checkpoint directory to resume from and how many processes wrote it.
            size: how many processes train now.
        """
        return self._resumed.stream(self._make_dataset(position), batches, saved, size)

    def start(self, position: int, batches: int, saved: Optional[tuple[Path, int]], size: int) -> Iterator:
        """The first iterator of this run's batches, as ``fit`` reads it: :meth:`stream`'s, restored.

        Args: as :meth:`stream`'s.
        """
        dataset, restore = self.stream(position, batches, saved, size)
        iterator = iter(dataset)
        if restore is not None:
            restore(iterator)
        return iterator

    def save(self, iterator: Iterator, directory: Path) -> None:
        """Writes this process's position (a tf.data iterator's state) into a checkpoint being written."""
        self._resumed.save(iterator, directory)

    def close(self) -> None:
        """Stops the threads and processes that read a Sequence."""
        if self._reader is not None:
            self._reader.close()


class ValidationData:
    """This process's share of the validation data, and how many examples the last evaluation saw.

    Args:
        dataset: this process's batches, one pass.
        steps: batches to evaluate (None: the whole pass).
        reader: the Sequence reader to stop at the end, if any.
        first_batch: a batch, to build the model with (Sequences).
        batches: how many batches the pass holds, when ``dataset`` does not know it
            (a Sequence's share); else read from the dataset when it knows it.
    """

    def __init__(
        self,
        dataset: tf.data.Dataset,
        steps: Optional[int] = None,
        reader: Optional[BatchReader] = None,
        first_batch: Optional[tuple] = None,
        batches: Optional[int] = None,
    ) -> None:
        self._examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="det_validation_examples")
        options = tf.data.Options()
        # Counting happens as Keras takes a batch: nothing may read ahead of it.
        options.experimental_optimization.inject_prefetch = False
        # An unknown length: Keras then evaluates an empty share (a process with no batch)
        # instead of refusing it, and that process still takes part in exact metrics' exchange.
        self.dataset = dataset.filter(lambda *batch: True).map(self._count).with_options(options)
        # Keras calls on_test_batch_begin before it reads each batch: on data of unknown length,
        # once more at the end, with no on_test_batch_end. Told the batches a share known to hold
        # some, it stops at the last, as a plain evaluate() of data of known length does.
        known = int(dataset.cardinality().numpy()) if batches is None else batches
        if known > 0:
            steps = known if steps is None else min(steps, known)
        self.steps = steps
        self._reader = reader
        self.first_batch = first_batch

    def _count(self, *batch: Any) -> Any:
        self._examples.assign_add(tf.cast(_batch_size(batch), tf.int64))
        batch = tf.nest.map_structure(_unknown_batch_size, batch)
        return batch if len(batch) > 1 else batch[0]

    def reset_count(self) -> None:
        """Starts counting examples afresh (before an evaluation)."""
        self._examples.assign(0)

    @property
    def examples(self) -> int:
        """Examples evaluated since :meth:`reset_count`."""
        return int(self._examples.numpy())

    def close(self) -> None:
        """Stops the threads and processes that read a Sequence."""
        if self._reader is not None:
            self._reader.close()


Loader = Union[tuple, tf.data.Dataset, tf.keras.utils.Sequence, SequenceAdapter]


def training_data(loader: Loader, context: TFKerasTrialContext) -> TrainingData:
    """The trial's training loader as a :class:`TrainingData` of this process.

    Raises:
        DataTypeError: the loader is of none of the five kinds.
        DataError: a tf.data.Dataset not wrapped on several processes, or unusable arrays.
    """
    which = "build_training_data_loader()"
    distributed, fit = context.distributed, context.fit_config
    shuffle_seed = context.get_trial_seed() if fit.shuffle else None
    if isinstance(loader, tf.data.Dataset):
        _check_wrapped(loader, context, which)
        dataset = _class_weighted(loader.repeat(), fit.class_weight)
        return TrainingData(lambda position: dataset, distributed.rank, saves_iterator=True)
    if isinstance(loader, tuple):
        arrays = ArrayData(loader, which)
        batch_size = context.get_per_slot_batch_size()

        def arrays_from(position: int) -> tf.data.Dataset:
            stream = arrays.training(batch_size, distributed.rank, distributed.size, position, shuffle_seed)
            return _class_weighted(stream, fit.class_weight)

        return TrainingData(arrays_from, distributed.rank)
    reader = _reader(loader, context, which)
    first_batch = reader.first_batch()
    signature = signature_of(first_batch)
    num_batches = len(reader.sequence)

    def sequence_from(position: int) -> tf.data.Dataset:
        first = position + distributed.rank
        epoch = first // num_batches
        for _ in range(epoch):  # the Sequence as it was when the trial reached this epoch
            reader.sequence.on_epoch_end()

        def batches() -> Iterator[tuple]:
            return reader.read(sequence_plan(num_batches, first, distributed.size, shuffle_seed), epoch)

        stream = tf.data.Dataset.from_generator(batches, output_signature=signature)
        return _class_weighted(stream, fit.class_weight).prefetch(1)

    return TrainingData(sequence_from, distributed.rank, reader=reader, first_batch=first_batch)


def validation_data(loader: Loader, context: TFKerasTrialContext, test_mode: bool = False) -> ValidationData:
    """The trial's validation loader as this process's :class:`ValidationData`.

    Raises:
        DataTypeError: the loader is of none of the five kinds.
        DataError: a tf.data.Dataset not wrapped on several processes, or unusable arrays.
    """
    which = "build_validation_data_loader()"
    distributed, fit = context.distributed, context.fit_config
    if isinstance(loader, tf.data.Dataset):
        _check_wrapped(loader, context, which)
        if fit.validation_steps is None and int(loader.cardinality().numpy()) == tf.data.INFINITE_CARDINALITY:
            # Keras would evaluate it forever, and no pause could reach the trial.
            raise DataError(
                f"The tf.data.Dataset returned by {which} is infinite (a repeat() without a count?): validation "
                "would never end. Return a dataset that ends, or set how many batches each process evaluates with "
                "self.context.configure_fit(validation_steps=N)."
            )
        return ValidationData(loader, steps=1 if test_mode else fit.validation_steps)
    steps = 1 if test_mode else None
    if isinstance(loader, tuple):
        arrays = ArrayData(loader, which)
        dataset = arrays.validation(context.get_per_slot_batch_size(), distributed.rank, distributed.size)
        return ValidationData(dataset, steps=steps)
    reader = _reader(loader, context, which)
    first_batch = reader.first_batch()
    indices = range(distributed.rank, len(reader.sequence), distributed.size)

    def one_pass() -> Iterator[tuple]:
        yield from reader.read((Placement(0, index) for index in indices), epoch=0)
        reader.sequence.on_epoch_end()  # as model.evaluate does after its pass

    dataset = tf.data.Dataset.from_generator(one_pass, output_signature=signature_of(first_batch))
    return ValidationData(dataset, steps=steps, reader=reader, first_batch=first_batch, batches=len(indices))


def _reader(loader: Any, context: TFKerasTrialContext, which: str) -> BatchReader:
    fit = context.fit_config
    if isinstance(loader, SequenceAdapter):
        return BatchReader(loader.sequence, loader.workers, loader.use_multiprocessing, loader.max_queue_size)
    if isinstance(loader, tf.keras.utils.Sequence):
        return BatchReader(loader, fit.workers, fit.use_multiprocessing, fit.max_queue_size)
    hint = " (a list: return a tuple)" if isinstance(loader, list) else ""
    raise DataTypeError(f"{which} must return {KINDS}. Received: {type(loader).__name__}{hint}")


def _check_wrapped(dataset: tf.data.Dataset, context: TFKerasTrialContext, which: str) -> None:
    if context.distributed.size > 1 and not context.is_wrapped_dataset(dataset):
        raise DataError(
            f"The tf.data.Dataset returned by {which} was never passed to context.wrap_dataset(). With "
            f"{context.distributed.size} processes, wrap each dataset right after creating it (before batching), so "
            "that each process reads its own share: dataset = self.context.wrap_dataset(dataset)."
        )


def _class_weighted(dataset: tf.data.Dataset, class_weight: Optional[Mapping[Any, float]]) -> tf.data.Dataset:
    """Each training batch with its examples weighted by their class, as ``model.fit(class_weight=...)`` weighs them.

    Keras' rule: the class of a label is its argmax when it has several columns, else
    the label rounded; the weight multiplies the sample weights, when there are some.
    """
    if not class_weight:
        return dataset
    if sorted(class_weight) != list(range(len(class_weight))):
        raise ValueError(
            "Expected `class_weight` to be a dict with keys from 0 to one less than the number of classes, "
            f"found {class_weight}"
        )
    table = tf.convert_to_tensor([class_weight[index] for index in range(len(class_weight))])

    def weighted(*batch: Any) -> tuple:
        x, y, sample_weight = tf.keras.utils.unpack_x_y_sample_weight(batch)
        if tf.nest.is_nested(y):
            raise ValueError("`class_weight` is only supported for Models with a single output.")
        weights = tf.gather(table, _classes(y))
        if sample_weight is None:
            return x, y, weights
        # Keras multiplies them after reshaping the sample weights to their static shape,
        # which these batches do not have (their size is known only when they are cut).
        weights = tf.cast(weights, sample_weight.dtype)
        extra_dims = max(weights.shape.rank - sample_weight.shape.rank, 0)
        shape = tf.concat([tf.shape(sample_weight), tf.ones([extra_dims], tf.int32)], axis=0)
        return x, y, tf.reshape(sample_weight, shape) * weights

    return dataset.map(weighted)


def _classes(y: tf.Tensor) -> tf.Tensor:
    """The class of each label: the argmax of one-hot (or probability) rows, else the label rounded."""
    if y.shape.rank < 2:
        return tf.cast(tf.round(y), tf.int64)
    if y.shape[-1] is not None:  # known when traced: only the branch that applies is built
        return tf.argmax(y, axis=-1) if y.shape[-1] > 1 else tf.cast(tf.round(tf.squeeze(y, axis=-1)), tf.int64)
    return tf.cond(
        tf.shape(y)[-1] > 1,
        lambda: tf.argmax(y, axis=-1),
        lambda: tf.cast(tf.round(tf.squeeze(y, axis=-1)), tf.int64),
    )


def _unknown_batch_size(tensor: Any) -> Any:
    """``tensor`` with its first dimension unknown to the graph (its value unchanged).

    Keras 3 weighs the loss by the batch size, a constant when the batches' size is
    static; its test step then adds that weight at the call that finds the data's end
    too (the count does not wait for the failed read), one batch too many in the mean.
    """
    if not isinstance(tensor, tf.Tensor) or tensor.shape.rank in (None, 0):
        return tensor
    return tf.raw_ops.PlaceholderWithDefault(input=tensor, shape=[None, *tensor.shape[1:]])


def _batch_size(batch: tuple) -> tf.Tensor:
    first = tf.nest.flatten(batch)[0]
    if isinstance(first, tf.SparseTensor):
        return first.dense_shape[0]
    if isinstance(first, tf.RaggedTensor):
        return first.nrows()
    return tf.shape(first, out_type=tf.int64)[0]
