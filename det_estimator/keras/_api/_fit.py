"""What ``context.fit`` adds to ``model.fit``: validation required, epochs from the searcher, equal steps everywhere.

- **Epochs.** In an experiment, ``epochs`` and ``initial_epoch`` come from the
  searcher: each operation's length is a number of epochs (``searcher.max_length``
  in epochs), or of batches or records rounded up to whole epochs; a resumed trial
  starts where its checkpoint stopped. Run by hand they are the caller's.
- **Equal steps.** Every process must train the same number of batches per epoch
  (Horovod, or the strategy, averages gradients at every batch): the shares of arrays
  are cut to the number of full-or-partial batches every process has, Sequences and
  datasets are run for the smallest number of batches any process has.
- **Each worker its own share.** Under the ``MultiWorkerMirroredStrategy`` of the
  TensorFlow launcher, ``model.fit`` would shard a process's share once more and split
  its batches over the workers: each worker is given its own share as its own batches
  instead (:func:`per_worker_inputs`), as a ``TFKerasTrial``'s workers are.
"""

import copy
import logging
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator.core import DistributedContext, Unit
from det_estimator.errors import PermanentTrialError
from det_estimator.keras._engine import _keras_compat, _sharding

logger = logging.getLogger("det_estimator.keras")

# Keras' batch size when none is given.
KERAS_DEFAULT_BATCH_SIZE = 32


class FitError(PermanentTrialError, ValueError):
    """``context.fit`` cannot run as called."""


@dataclass(frozen=True)
class Lengths:
    """How a searcher operation's length maps to ``model.fit``'s epochs.

    Attributes:
        unit: the unit of ``searcher.max_length``.
        steps_per_epoch: batches per epoch (on every process; each is one global batch).
        global_batch_size: records per global batch, for lengths in records.
    """

    unit: Unit
    steps_per_epoch: Optional[int]
    global_batch_size: int

    def epochs(self, length: int) -> int:
        """The epochs to train in all for an operation of ``length``, rounded up to a whole epoch.

        Raises:
            FitError: a length in batches or records when the batches per epoch are unknown.
        """
        if self.unit == Unit.EPOCHS:
            return int(length)
        if not self.steps_per_epoch:
            raise FitError(
                f"searcher.max_length is in {self.unit.value.lower()}, and the batches of an epoch are unknown "
                "(a tf.data.Dataset of unknown length): give max_length in epochs, or pass steps_per_epoch."
            )
        batches = int(length)
        if self.unit == Unit.RECORDS:
            batches = max(1, math.ceil(length / self.global_batch_size))
        epochs = max(1, math.ceil(batches / self.steps_per_epoch))
        if epochs * self.steps_per_epoch != batches:
            logger.warning(
                "searcher length %d %s is %d batches, not a whole number of epochs of %d batches: training %d epochs",
                length,
                self.unit.value.lower(),
                batches,
                self.steps_per_epoch,
                epochs,
            )
        return epochs


def has_validation(validation_data: Any, validation_split: float) -> bool:
    """Whether ``model.fit`` would validate with these arguments."""
    return validation_data is not None or bool(validation_split)


def require_validation(validation_data: Any, validation_split: float) -> None:
    """In an experiment ``context.fit`` must validate: the searcher and checkpoint retention need the metrics.

    Raises:
        FitError: no validation data.
    """
    if not has_validation(validation_data, validation_split):
        raise FitError(
            "context.fit() in an experiment needs validation data: pass validation_data=(x_val, y_val) (or a "
            "Sequence or tf.data.Dataset), x_val= and y_val=, or validation_split=. The searcher judges the trial "
            "by its validation metrics."
        )


def local_steps(x: Any, batch_size: Optional[int]) -> Optional[int]:
    """The batches of one epoch of this process's training input; None when unknown."""
    if isinstance(x, tf.data.Dataset):
        cardinality = int(x.cardinality().numpy())
        return cardinality if cardinality >= 0 else None
    if isinstance(x, tf.keras.utils.Sequence):
        return len(x)
    leaves = tf.nest.flatten(x)
    if not leaves:
        return None
    return math.ceil(len(leaves[0]) / (batch_size or KERAS_DEFAULT_BATCH_SIZE))


def equal_steps(
    distributed: DistributedContext, x: Any, y: Any, sample_weight: Any, batch_size: Optional[int]
) -> tuple[Any, Any, Any, Optional[int]]:
    """The training input cut so that every process trains the same batches per epoch (a collective).

    Returns:
        ``(x, y, sample_weight, steps_per_epoch)``: arrays cut to the common number of
        batches (and ``steps_per_epoch`` None), a dataset cut with ``take``, or a
        Sequence with the common ``steps_per_epoch``.

    Raises:
        FitError: a process's input has an unknown number of batches (pass ``steps_per_epoch``).
    """
    mine = local_steps(x, batch_size)
    every = distributed.allgather(mine)
    if any(steps is None for steps in every):
        raise FitError(
            "With several processes, context.fit() needs the batches of an epoch of every process's input, and a "
            "tf.data.Dataset here has an unknown or infinite length: pass steps_per_epoch=."
        )
    steps = min(every)
    if steps < 1:
        raise FitError(f"A process has no training batch (batches per process: {every}): give it more data.")
    if steps != max(every):
        logger.info("every process trains %d batches per epoch (the fewest any has; they have %s)", steps, every)
    if isinstance(x, tf.data.Dataset):
        return (x.take(steps) if mine != steps else x), y, sample_weight, None
    if isinstance(x, tf.keras.utils.Sequence):
        return x, y, sample_weight, steps
    records = steps * (batch_size or KERAS_DEFAULT_BATCH_SIZE)

    def cut(structure: Any) -> Any:
        return None if structure is None else tf.nest.map_structure(lambda leaf: leaf[:records], structure)

    return cut(x), cut(y), cut(sample_weight), None


def per_worker_inputs(
    model: tf.keras.Model, distributed: DistributedContext, x: Any, y: Any, fit_kwargs: dict[str, Any], seed: int
) -> tuple[Any, dict[str, Any]]:
    """Each worker's share as its own batches, under a strategy whose workers are the processes (a collective).

    The training share (arrays cut by :func:`equal_steps`, or a batched dataset) becomes
    this process's batches of ``batch_size`` records (Keras' default 32), shuffled each
    epoch from ``seed`` when ``shuffle`` (as ``model.fit`` shuffles arrays); the strategy
    averages the gradients of each step over the workers, so that a step trains the
    records of one global batch. Every worker evaluates its validation share, in batches
    of ``validation_batch_size`` (else ``batch_size``), until the longest share ends; the
    strategy sums the metrics' states over the workers.

    Returns:
        ``(x, fit_kwargs)`` for ``model.fit(x, **fit_kwargs)``: ``y``, ``sample_weight``,
        ``batch_size``, ``shuffle`` and ``validation_batch_size`` are in the data now.

    Raises:
        FitError: data given as a Sequence or a generator, or (tf-keras) a validation
            dataset of unknown length without ``validation_steps``.
    """
    fit_kwargs = dict(fit_kwargs)
    batch_size = fit_kwargs.pop("batch_size", None) or KERAS_DEFAULT_BATCH_SIZE
    shuffle_seed = seed if fit_kwargs.pop("shuffle", True) else None
    steps = fit_kwargs.get("steps_per_epoch") or local_steps(x, batch_size)
    training = _as_batches((x, y, fit_kwargs.pop("sample_weight", None)), batch_size, "x", shuffle_seed)
    x, steps_per_epoch = _sharding.per_worker_epochs(model, training, steps)
    fit_kwargs["shuffle"] = False  # shuffled above, if at all: Keras shuffles no dataset
    if fit_kwargs.get("steps_per_epoch") is None and steps_per_epoch is not None:
        fit_kwargs["steps_per_epoch"] = steps_per_epoch
    validation_data = fit_kwargs.get("validation_data")
    validation_batch_size = fit_kwargs.pop("validation_batch_size", None) or batch_size
    if validation_data is None:
        return x, fit_kwargs
    parts = tuple(validation_data) if isinstance(validation_data, (tuple, list)) else (validation_data,)
    fit_kwargs["validation_data"], validation_steps = per_worker_validation(
        model, distributed, parts, validation_batch_size, fit_kwargs.get("validation_steps")
    )
    if validation_steps is not None:
        fit_kwargs["validation_steps"] = validation_steps
    return x, fit_kwargs


def per_worker_validation(
    model: tf.keras.Model, distributed: DistributedContext, parts: tuple, batch_size: int, steps: Optional[int]
) -> tuple[Any, Optional[int]]:
    """This worker's validation share as its own batches, evaluated until the longest share ends (a collective).

    Args:
        model: the model, whose strategy's workers are the processes.
        distributed: the processes.
        parts: ``(x, y[, sample_weight])`` arrays, or ``(dataset,)`` of batches.
        batch_size: the batch size of arrays.
        steps: the batches to evaluate, if the caller gave them.

    Returns:
        The data and the steps to give ``fit`` (``validation_data``, ``validation_steps``)
        or ``evaluate`` (``x``, ``steps``); steps None: Keras reads to the end.

    Raises:
        FitError: data given as a Sequence or a generator, or (tf-keras) a dataset of unknown
            length without ``steps``.
    """
    validation = _as_batches(parts, batch_size, "validation data", None)
    every = distributed.allgather(local_steps(validation, None) if steps is None else steps)
    if not _keras_compat.KERAS_3 and any(count is None for count in every):
        raise FitError(
            "On several workers of a tf.distribute strategy under tf-keras, the batches of every process's "
            "validation data must be known, and a tf.data.Dataset here has an unknown length: pass the batches of "
            "the longest share (validation_steps= to context.fit, steps= to context.evaluate)."
        )
    longest = max((count for count in every if count is not None), default=0)
    return _sharding.per_worker_passes(model, validation, longest)


def _as_batches(parts: tuple, batch_size: int, which: str, shuffle_seed: Optional[int]) -> tf.data.Dataset:
    """``(x, y, sample_weight)`` arrays as a dataset of batches of ``batch_size``; a dataset (batched) as it is.

    Raises:
        FitError: a Sequence, a generator or anything else ``Dataset.from_tensor_slices`` does not take.
    """
    if isinstance(parts[0], tf.data.Dataset):
        return parts[0]
    arrays = tuple(part for part in parts if part is not None)
    try:
        if isinstance(parts[0], tf.keras.utils.Sequence):
            raise TypeError(type(parts[0]).__name__)
        dataset = tf.data.Dataset.from_tensor_slices(arrays)
    except (TypeError, ValueError) as error:
        raise FitError(
            f"On several workers of a tf.distribute strategy (the TensorFlow launcher), context.fit() takes {which} "
            f"as arrays or a batched tf.data.Dataset, each process's share (context.wrap_data). Received: "
            f"{type(parts[0]).__name__} ({error})"
        ) from None
    if shuffle_seed is not None:
        records = len(tf.nest.flatten(arrays)[0])
        dataset = dataset.shuffle(records, seed=shuffle_seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size)


def split_validation(x: Any, y: Any, sample_weight: Any, validation_split: float) -> tuple[Any, Any]:
    """Keras' own ``validation_split`` of arrays: the last fraction of each share validates.

    Returns:
        ``((x, y, sample_weight) to train on, (x, y, sample_weight) to validate on)``.

    Raises:
        ValueError: an input is not an array or a tensor, or too few records to split.
    """
    arrays = (x, y, sample_weight)
    leaves = [leaf for leaf in tf.nest.flatten(arrays) if leaf is not None]
    unsplittable = [type(leaf) for leaf in leaves if not isinstance(leaf, (tf.Tensor, np.ndarray))]
    if unsplittable:
        raise ValueError(
            "`validation_split` is only supported for Tensors or NumPy arrays, found following types in the input: "
            f"{unsplittable}"
        )
    if not leaves:
        return arrays, arrays
    records = int(leaves[0].shape[0])
    split_at = int(math.floor(records * (1.0 - validation_split)))
    if split_at in (0, records):
        raise ValueError(
            f"Training data contains {records} samples, which is not sufficient to split it into a validation and "
            f"training set as specified by `validation_split={validation_split}`. Either provide more data, or a "
            "different value for the `validation_split` argument."
        )

    def part(start: int, end: int) -> Any:
        return tf.nest.map_structure(lambda leaf: None if leaf is None else leaf[start:end], arrays)

    return part(0, split_at), part(split_at, records)


def merge_histories(histories: list[tf.keras.callbacks.History]) -> Optional[tf.keras.callbacks.History]:
    """One History of several ``fit`` calls in a row (one per searcher operation): the last's, with every epoch.

    The Histories given are left as they are.
    """
    histories = [history for history in histories if history is not None]
    if not histories:
        return None
    last = histories[-1]
    if len(histories) == 1:
        return last
    merged: dict[str, list] = {}
    epochs: list[int] = []
    for history in histories:
        epochs.extend(history.epoch)
        for key, values in history.history.items():
            merged.setdefault(key, []).extend(values)
    combined = copy.copy(last)
    combined.epoch, combined.history = epochs, merged
    return combined


def searcher_metric_value(history: tf.keras.callbacks.History, metric: str) -> Any:
    """The searcher metric's latest value in ``history``: ``val_loss`` or ``loss`` both name the validation loss.

    Raises:
        FitError: no validation logged that metric.
    """
    name = metric if metric.startswith("val_") else f"val_{metric}"
    values = history.history.get(name) if history is not None else None
    if not values:
        logged = sorted(key for key in (history.history if history is not None else {}) if key.startswith("val_"))
        raise FitError(
            f"searcher.metric {metric!r} was not among the validation metrics of context.fit(): "
            f"{', '.join(logged) or 'none'} (name one of them, with or without val_)."
        )
    value = values[-1]
    return float(value) if isinstance(value, (int, float, np.floating, np.integer)) else value
