"""The data position: where training stands in its input, and how each kind of input resumes there.

A checkpoint records a :class:`Position` (in its metadata). Each kind of input resumes
at it in one of three ways:

- :class:`Addressable`: the streams the engine builds for a trial's NumPy arrays and
  Sequences (see ``_sharding``). Batch ``k`` of the global stream is a function of ``k``
  alone, so the stream is rebuilt at ``data_position`` (the batches of the global
  stream all processes read before) at no cost.
- :class:`IteratorState`: a trial's own ``tf.data`` pipeline. Each process's iterator
  state (buffers and all) is in every checkpoint (``data/rank<N>``) and is restored;
  when it could not be saved, or another number of processes wrote it, the pipeline
  restarts and skips the batches already trained.
- :class:`Replay`: a script's own ``model.fit``, resumed at ``(epoch, batch)``. ``fit``
  starts at that epoch and batch; the resumed epoch reads the iterator an
  uninterrupted ``fit`` would have read (a dataset reshuffled each epoch draws the same
  order) and drops the batches already trained. The caller restores Python's and
  NumPy's random states of the epoch's start, from which Keras shuffles a Sequence.
"""

import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from det_estimator.keras._engine import _keras_compat
from det_estimator.keras._engine._sequences import DataError

logger = logging.getLogger("det_estimator.keras")

# The checkpoint directory of the training iterators' states, one file set per process.
ITERATORS_DIR = "data"


@dataclass
class Position:
    """Where training stands, as every checkpoint's metadata records it.

    Attributes:
        steps_completed: batches trained since the start of training, over every run.
        epoch: the epoch being trained (a script's ``fit``; a trial's, of ``records_per_epoch``).
        batch: the batches of it trained.
        data_position: batches of the global input stream all processes read (a trial).
        slots: how many processes trained.
        continue_id: a script's id of its training; the same id continues it.
        steps_per_epoch: batches per epoch, when known.
        epochs: epochs to train, when known.
    """

    steps_completed: int = 0
    epoch: Optional[int] = None
    batch: Optional[int] = None
    data_position: Optional[int] = None
    slots: Optional[int] = None
    continue_id: Any = None
    steps_per_epoch: Optional[int] = None
    epochs: Optional[int] = None

    def metadata(self) -> dict[str, Any]:
        """The position as a checkpoint's metadata holds it (``steps_completed`` first)."""
        return asdict(self)

    @classmethod
    def saved(cls, saved: dict[str, Any]) -> "Position":
        """The position a checkpoint recorded (its entries that are None take the defaults)."""
        known = {key: value for key, value in saved.items() if key in cls.__dataclass_fields__ and value is not None}
        return cls(**known)


# How a stream resumes: the dataset to read, and what to do with the first iterator made of it (or None).
Resumed = tuple[tf.data.Dataset, Optional[Callable[[Iterator], None]]]


class Addressable:
    """An input whose batches the engine addresses by number: it is built at its position, nothing is saved."""

    def stream(self, dataset: tf.data.Dataset, batches: int, saved: Optional[tuple[Path, int]], size: int) -> Resumed:
        """``dataset`` as it is: already built at the position."""
        return dataset, None

    def save(self, iterator: Iterator, directory: Path) -> None:
        """Nothing: the position in the metadata is enough."""


class IteratorState:
    """A ``tf.data`` pipeline's position: this process's iterator state, saved and restored.

    Args:
        rank: this process's rank.
    """

    def __init__(self, rank: int) -> None:
        self._rank = rank
        self._warned_unsaved = False

    def stream(self, dataset: tf.data.Dataset, batches: int, saved: Optional[tuple[Path, int]], size: int) -> Resumed:
        """The dataset of this run's batches, and what restores the saved state into its first iterator.

        Args:
            dataset: the pipeline, from its beginning.
            batches: batches this process trained before this run.
            saved: the checkpoint directory to resume from and how many processes wrote it.
            size: how many processes train now.

        Raises:
            DataError: (when the first iterator is restored) the saved state is not that of this pipeline.
        """
        if batches == 0:
            return dataset, None
        # This process's position, if the checkpoint was written by as many processes.
        prefix = saved[0] / ITERATORS_DIR / f"rank{self._rank}" if saved is not None and saved[1] == size else None
        if prefix is not None and Path(f"{prefix}.index").exists():
            return dataset, _restorer(prefix)
        logger.warning(
            "The checkpoint holds no position of this process's training dataset (%s): the dataset restarts and "
            "skips the %d batches already trained, which takes time in proportion to them.",
            "it was written by another number of processes" if saved and saved[1] != size else "it could not be saved",
            batches,
        )
        return dataset.skip(batches), None

    def save(self, iterator: Iterator, directory: Path) -> None:
        """Writes this process's position (the iterator's state) into a checkpoint being written."""
        if isinstance(iterator, tf.distribute.DistributedIterator):
            # A strategy's distributed dataset reads through a multi-device iterator, which
            # TensorFlow cannot checkpoint (nor any tf.distribute iterator).
            self._warn_unsaved(
                "the training dataset is read through a tf.distribute strategy's distributed iterator, whose "
                "state TensorFlow cannot save",
                "A dataset reshuffled each epoch then draws the later epochs' orders afresh.",
            )
            return
        (directory / ITERATORS_DIR).mkdir(exist_ok=True)
        prefix = directory / ITERATORS_DIR / f"rank{self._rank}"
        try:
            tf.train.Checkpoint(iterator=iterator).write(str(prefix))
        except (tf.errors.OpError, ValueError, TypeError) as error:
            for partial in prefix.parent.glob(f"{prefix.name}.*"):
                partial.unlink()
            self._warn_unsaved(
                str(error).splitlines()[0],
                "Pipelines of tf.data operations save theirs; Python generators and py_function do not.",
            )

    def _warn_unsaved(self, reason: str, note: str) -> None:
        """Says once why the position is not saved, and what a resume does instead."""
        if not self._warned_unsaved:
            self._warned_unsaved = True
            logger.warning(
                "The training dataset's position cannot be saved (%s); a resumed trial will skip the batches "
                "already trained instead. %s",
                reason,
                note,
            )


def _restorer(prefix: Path) -> Callable[[Iterator], None]:
    """Restores the iterator state saved at ``prefix`` into an iterator of the same pipeline."""

    def restore(iterator: Iterator) -> None:
        try:
            tf.train.Checkpoint(iterator=iterator).read(str(prefix)).assert_consumed()
        except (tf.errors.OpError, AssertionError, ValueError) as error:
            raise DataError(
                f"The position of the training dataset saved in {prefix} cannot be restored: {error}. "
                "Does build_training_data_loader() build the same pipeline as when the checkpoint was written?"
            ) from error

    return restore


class Replay:
    """A script's own ``model.fit`` resumed at an epoch and a batch in it.

    Args:
        epoch: the epoch to resume.
        batch: the batches of it already trained.
        steps_per_epoch: the batches of an epoch, when fit knows them.
    """

    def __init__(self, epoch: int, batch: int, steps_per_epoch: Optional[int] = None) -> None:
        self.epoch = epoch
        self.batch = batch
        self._steps_per_epoch = steps_per_epoch
        self._start: Optional[_FitStart] = None
        self._fit_iterator: Any = None

    def start(self, model: tf.keras.Model, tap: Any) -> None:
        """Makes the ``fit`` that is beginning start at the position (call it in ``on_train_begin``).

        Args:
            model: the model ``fit`` trains.
            tap: the engine's :class:`~det_estimator.keras._engine._tap.Tap` of the model.
        """
        self._start = _FitStart(self.epoch, self.batch)
        _keras_compat.set_fit_start(model, self._start)
        if self.epoch or self.batch:
            # Keras 3 starts the epoch at its first step whatever the batch: its steps end with the
            # epoch's batches left, as an uninterrupted fit's do, not at a read past the data's end.
            left = self._steps_per_epoch - self.batch if self._steps_per_epoch and _keras_compat.KERAS_3 else None
            calls = left if tap.batches_per_call == 1 else None
            tap.read_first(self._resumed_epoch, calls=calls, on_end=self._end_resumed_epoch)

    def started(self, model: tf.keras.Model) -> None:
        """``fit`` read where to start (its first epoch began): nothing else may see it."""
        if self._start is not None and _keras_compat.fit_start(model) is self._start:
            _keras_compat.set_fit_start(model, None)
        self._start = None

    def _resumed_epoch(self, iterator: Any) -> Any:
        """The resumed epoch's iterator, its batches already trained read and dropped."""
        self._fit_iterator = iterator
        epoch_iterator = iterator_of_epoch(iterator, self.epoch)
        for _ in range(self.batch):
            next(epoch_iterator)
        return epoch_iterator

    def _end_resumed_epoch(self) -> None:
        """The resumed epoch ended before fit's last step: the iterators fit makes after that step are made here.

        A dataset reshuffled each epoch draws an order per iterator: the next epochs then read
        the orders an uninterrupted fit gives them.
        """
        dataset = _keras_compat.dataset_of(self._fit_iterator)
        if dataset is not None:
            for _ in range(_keras_compat.iterators_made_per_epoch() - 1):
                iter(dataset)


class _FitStart:
    """What ``fit`` asks a model's training state for: the epoch and batch at which to start."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.epoch = epoch
        self.batch = batch

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch: Any, initial_epoch: int, mode: Any) -> tuple:
        return self.epoch, self.batch

    def back_up(self, *args: Any, **kwargs: Any) -> None:
        """Keras' own fault-tolerance calls it when it saves; the engine saves instead."""

    def delete_backup(self) -> None:
        """Nothing to delete."""


def iterator_of_epoch(iterator: Any, epochs: int) -> Any:
    """The iterator ``fit`` would read epoch ``epochs`` from in an uninterrupted run, for a dataset's own iterator.

    A ``tf.data.Dataset`` shuffled anew each epoch draws each epoch's order from its seed
    generator when ``fit`` makes the epoch's iterator; the resumed process's dataset
    starts that generator afresh. ``fit`` makes one iterator of the dataset before its
    first epoch and one per epoch; a resumed ``fit`` gives the resumed epoch the second,
    where an uninterrupted one gave it the ``epochs + 2``-th: the iterators of the
    ``epochs`` before are made first (and dropped). Other iterators (a distributed
    dataset's, a generator's) are returned as they are.
    """
    dataset = _keras_compat.dataset_of(iterator)
    if not epochs or dataset is None:
        return iterator
    # Keras 3 makes two iterators an epoch, and the resumed fit's first epoch reads the first:
    # the one an uninterrupted fit gave epoch ``epochs`` comes ``2 * epochs`` iterators later.
    for _ in range(epochs * _keras_compat.iterators_made_per_epoch()):
        fresh = iter(dataset)
    return fresh
