"""Keras Sequences as input: SequenceAdapter, and the ordered read-ahead of batches in threads or processes.

A Sequence's batches are read in a fixed order (see :mod:`det_estimator.keras._engine._inputs`
for which batch each process reads): workers read ahead, but batches come out in order,
so training is the same with 0, 1 or 8 workers, with threads or processes.
"""

import collections
import concurrent.futures
import multiprocessing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator.errors import PermanentTrialError


class DataError(PermanentTrialError, ValueError):
    """A data loader cannot be used as returned.

    Raised by the harness about what the trial returned, in no frame of the user's: the
    command shows its message alone.
    """


class SequenceAdapter:
    """A ``keras.utils.Sequence`` with how to read it: in the input pipeline, in threads or in processes.

    Return it from ``build_training_data_loader()`` or
    ``build_validation_data_loader()`` to choose, for that Sequence, what
    ``configure_fit(workers=..., use_multiprocessing=..., max_queue_size=...)`` chooses
    for all of them. Batches always come out in the Sequence's order (or the trial's
    shuffled order), whatever reads them.

    Args:
        sequence: the ``keras.utils.Sequence``; its items are ``(inputs, targets)`` or
            ``(inputs, targets, sample_weights)`` batches.
        use_multiprocessing: read in processes (forked, so the Sequence need not be
            picklable; its batches must be) rather than threads.
        workers: how many threads or processes read ahead; 0 reads each batch when it
            is needed, in the input pipeline.
        max_queue_size: how many batches are read ahead at most.

    Raises:
        TypeError: ``sequence`` is not a ``keras.utils.Sequence``.
        ValueError: ``workers`` is negative or ``max_queue_size`` below 1.

    Example:
        ::

            SequenceAdapter(sequence, workers=0, use_multiprocessing=False)  # the main process only
            SequenceAdapter(sequence, workers=1, use_multiprocessing=True)  # one background process
            SequenceAdapter(sequence, workers=2, use_multiprocessing=False)  # two background threads
    """

    def __init__(
        self,
        sequence: tf.keras.utils.Sequence,
        use_multiprocessing: bool = False,
        workers: int = 1,
        max_queue_size: int = 10,
    ) -> None:
        if not isinstance(sequence, tf.keras.utils.Sequence):
            raise TypeError(f"Argument `sequence` must be a keras.utils.Sequence. Received: {type(sequence).__name__}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"Argument `workers` must be an integer of at least 0. Received: workers={workers!r}")
        if isinstance(max_queue_size, bool) or not isinstance(max_queue_size, int) or max_queue_size < 1:
            raise ValueError(
                "Argument `max_queue_size` must be an integer of at least 1. "
                f"Received: max_queue_size={max_queue_size!r}"
            )
        self.sequence = sequence
        self.use_multiprocessing = bool(use_multiprocessing)
        self.workers = workers
        self.max_queue_size = max_queue_size


@dataclass(frozen=True)
class Placement:
    """Where one batch of a Sequence comes from: its epoch (how many passes before it) and its index."""

    epoch: int
    index: int


class BatchReader:
    """Reads a Sequence's batches in a given order, ahead of need, in threads or processes.

    Args:
        sequence: the Sequence.
        workers: threads or processes reading ahead (0: read on demand).
        use_multiprocessing: processes rather than threads.
        max_queue_size: batches read ahead at most.
    """

    def __init__(self, sequence: tf.keras.utils.Sequence, workers: int, use_multiprocessing: bool, max_queue_size: int):
        self.sequence = sequence
        self._workers = workers
        self._use_multiprocessing = use_multiprocessing
        self._max_queue_size = max_queue_size
        self._executors: list[concurrent.futures.Executor] = []

    def first_batch(self) -> tuple:
        """The Sequence's first batch, as a tuple, to learn the structure and dtypes of all of them."""
        if len(self.sequence) < 1:
            raise DataError(f"The Sequence {type(self.sequence).__name__} is empty: it must have at least one batch.")
        return as_batch(self.sequence[0], 0)

    def read(self, plan: Iterable[Placement], epoch: int) -> Iterator[tuple]:
        """Yields the batches of ``plan`` in order; the Sequence has seen ``epoch`` epoch ends so far.

        When the plan moves to a later epoch, the batches of the earlier one are read
        first, then the Sequence's ``on_epoch_end()`` is called once per epoch passed
        (and worker processes start again from the updated Sequence).
        """
        pending: collections.deque = collections.deque()
        executor = None
        try:
            for placement in plan:
                if placement.epoch != epoch:
                    concurrent.futures.wait([future for _, future in pending])  # the earlier epoch's reads are done
                    for _ in range(placement.epoch - epoch):
                        self.sequence.on_epoch_end()
                    epoch = placement.epoch
                    if executor is not None and self._use_multiprocessing:
                        self._shut_down(executor)
                        executor = None
                if self._workers == 0:
                    yield as_batch(self.sequence[placement.index], placement.index)
                    continue
                executor = executor or self._start()
                pending.append((placement.index, executor.submit(_read_batch, self._source(), placement.index)))
                if len(pending) >= self._max_queue_size:
                    index, future = pending.popleft()
                    yield as_batch(future.result(), index)
            while pending:
                index, future = pending.popleft()
                yield as_batch(future.result(), index)
        finally:
            for _, future in pending:
                future.cancel()
            if executor is not None:
                self._shut_down(executor)

    def close(self) -> None:
        """Stops every thread and process still reading."""
        for executor in list(self._executors):
            self._shut_down(executor)

    def _source(self) -> Optional[tf.keras.utils.Sequence]:
        # A thread reads the Sequence itself; a process reads its copy, made when it was forked.
        return None if self._use_multiprocessing else self.sequence

    def _start(self) -> concurrent.futures.Executor:
        if self._use_multiprocessing:
            executor: concurrent.futures.Executor = concurrent.futures.ProcessPoolExecutor(
                self._workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_share_sequence,
                initargs=(self.sequence,),
            )
        else:
            executor = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix="det-sequence")
        self._executors.append(executor)
        return executor

    def _shut_down(self, executor: concurrent.futures.Executor) -> None:
        executor.shutdown(wait=True, cancel_futures=True)
        if executor in self._executors:
            self._executors.remove(executor)


# The Sequence a reading process was forked with.
_SHARED_SEQUENCE: Optional[tf.keras.utils.Sequence] = None


def _share_sequence(sequence: tf.keras.utils.Sequence) -> None:
    global _SHARED_SEQUENCE
    _SHARED_SEQUENCE = sequence


def _read_batch(sequence: Optional[tf.keras.utils.Sequence], index: int) -> Any:
    source = sequence if sequence is not None else _SHARED_SEQUENCE
    if source is None:
        raise RuntimeError("No Sequence to read a batch of: none was given, and none was shared with this process.")
    return source[index]


def as_batch(item: Any, index: int) -> tuple:
    """A Sequence item as Keras takes a batch: ``(inputs,)``, ``(inputs, targets)`` or with weights; lists as tuples.

    Raises:
        DataError: the item is a tuple of more than three elements.
    """
    if isinstance(item, list):
        item = tuple(item)
    if not isinstance(item, tuple):
        item = (item,)
    if not 1 <= len(item) <= 3:
        raise DataError(
            "A Sequence's items must be (inputs, targets) or (inputs, targets, sample_weights). "
            f"Received: a tuple of {len(item)} elements at index {index}"
        )
    return tuple(_lists_as_tuples(part) for part in item)


def _lists_as_tuples(structure: Any) -> Any:
    """Lists inside a batch (the inputs of a model with several) as tuples, which tf.data keeps apart."""
    if isinstance(structure, (list, tuple)):
        return tuple(_lists_as_tuples(item) for item in structure)
    if isinstance(structure, dict):
        return {key: _lists_as_tuples(item) for key, item in structure.items()}
    return structure


def signature_of(batch: tuple) -> Any:
    """The ``output_signature`` for batches like ``batch``: its structure and dtypes, every dimension unknown.

    Unknown dimensions let batches differ in size (the last one) and in length (variable
    sequences), as Keras does for Sequences.
    """

    def spec(leaf: Any) -> tf.TensorSpec:
        tensor = tf.convert_to_tensor(leaf)
        return tf.TensorSpec([None] * tensor.shape.rank, tensor.dtype)

    return tf.nest.map_structure(spec, batch)


def epoch_order(num_batches: int, epoch: int, shuffle_seed: Optional[int]) -> np.ndarray:
    """The order of a Sequence's batches in ``epoch``: as they are, or shuffled from the seed and the epoch."""
    if shuffle_seed is None:
        return np.arange(num_batches)
    return np.random.default_rng([shuffle_seed, epoch]).permutation(num_batches)
