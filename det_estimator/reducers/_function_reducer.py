"""Adapts a plain function of all per-batch values to the MetricReducer interface."""

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from det_estimator.reducers._base import MetricReducer


class FunctionReducer(MetricReducer):
    """Buffers every batch's value and applies ``fn`` to all of them at the end.

    ``fn`` receives the batches of all ranks in the order the validation dataset had
    before ``wrap_dataset`` sharded it round-robin, so it computes the same value on one
    process and on many (see :func:`merge_in_dataset_order`). Numeric arrays in a batch
    are kept as copies in a few large buffers of this reducer's own (see :class:`_Arena`).

    Args:
        fn: a function of the list of every batch's metric value.
    """

    def __init__(self, fn: Callable[[list[Any]], Any]):
        self.fn = fn
        self._batches: list[Any] = []
        self._arena = _Arena()

    def accumulate(self, metric: Any) -> list[Any]:
        """Buffers one batch's value; the state is the list of this rank's batches."""
        keep = self._arena.keep
        if isinstance(metric, dict):
            metric = {key: keep(leaf) for key, leaf in metric.items()}
        elif isinstance(metric, (list, tuple)):
            metric = type(metric)(keep(leaf) for leaf in metric)
        else:
            metric = keep(metric)
        self._batches.append(metric)
        return self._batches

    def cross_slot_reduce(self, per_slot_metrics: list[list[Any]]) -> Any:
        """Applies ``fn`` to all ranks' batches, restored to the dataset's order."""
        return self.fn(merge_in_dataset_order(per_slot_metrics))

    def __repr__(self) -> str:
        return f"FunctionReducer({getattr(self.fn, '__qualname__', self.fn)!r})"


class _Arena:
    """Copies numeric arrays into large buffers, one being filled per dtype, and hands back views of them.

    ``make_metric`` hands each batch over as NumPy arrays that share TensorFlow's own
    tensors. Keeping those alive made the median step of ``estimator.evaluate`` (about
    650 us) some 90 us slower than a plain one; with the copies here it is 13-30 us
    slower, as with ``RocAuc`` (``benchmarks/reducers.py``, table 3). A small copy of
    each array instead was about 30 us slower. Other values (strings, objects, Python
    scalars) are kept as they are.
    """

    BUFFER_BYTES = 1 << 22

    def __init__(self) -> None:
        self._filling: dict[np.dtype, tuple[np.ndarray, int]] = {}

    def keep(self, value: Any) -> Any:
        if type(value) is not np.ndarray or value.dtype.kind not in "biufc":
            return value
        buffer, used = self._filling.get(value.dtype, (None, 0))
        if buffer is None or used + value.size > buffer.size:
            # np.empty touches no page: a buffer costs memory only as far as it is filled.
            buffer, used = np.empty(max(self.BUFFER_BYTES // value.itemsize, value.size), value.dtype), 0
        kept = buffer[used : used + value.size].reshape(value.shape)
        kept[...] = value
        self._filling[value.dtype] = (buffer, used + value.size)
        return kept


def merge_in_dataset_order(per_rank_batches: Sequence[Sequence[Any]]) -> list[Any]:
    """Undoes round-robin sharding: the per-rank batch lists merged into one list.

    ``wrap_dataset`` gives rank ``r`` of ``N`` the records ``r, r + N, r + 2N, ...``, and
    each rank batches its share with the per-slot batch size. The ``i``-th batches of all
    ranks together hold exactly the records of the ``i``-th batch of a one-process run
    with the global batch size, so when every value in a batch has a leading record
    dimension the ``i``-th batches are interleaved record by record back into that one
    batch. Values without a record dimension (scalars), or batches whose sizes do not
    follow the round-robin pattern, are kept as separate batches, in the order rank 0's
    first batch, rank 1's first batch, ..., rank 0's second batch, and so on.

    A value is an array, a list of arrays, or a dict of arrays (the structures
    ``make_metric`` accepts).
    """
    merged: list[Any] = []
    num_steps = max((len(batches) for batches in per_rank_batches), default=0)
    for step in range(num_steps):
        step_batches = [batches[step] for batches in per_rank_batches if step < len(batches)]
        merged.extend(_interleave_records(step_batches))
    return merged


def _interleave_records(batches: list[Any]) -> list[Any]:
    if len(batches) < 2:
        return list(batches)
    leaves_per_rank = [_leaves(batch) for batch in batches]
    if any(leaves is None for leaves in leaves_per_rank):
        return list(batches)
    if len({len(leaves) for leaves in leaves_per_rank}) != 1:
        return list(batches)
    counts = [leaves[0].shape[0] for leaves in leaves_per_rank]
    if not _is_round_robin_split(counts):
        return list(batches)
    combined_leaves = []
    for same_leaf_of_each_rank in zip(*leaves_per_rank):
        combined = _interleave_arrays(same_leaf_of_each_rank)
        if combined is None:
            return list(batches)
        combined_leaves.append(combined)
    return [_rebuild(batches[0], combined_leaves)]


def _leaves(value: Any):
    """The arrays in a batch value if all have the same leading record dimension, else None."""
    if isinstance(value, dict):
        leaves = [np.asarray(value[key]) for key in sorted(value)]
    elif isinstance(value, (list, tuple)):
        leaves = [np.asarray(leaf) for leaf in value]
    else:
        leaves = [np.asarray(value)]
    if not leaves or any(leaf.ndim == 0 for leaf in leaves):
        return None
    if len({leaf.shape[0] for leaf in leaves}) != 1:
        return None
    return leaves


def _rebuild(template: Any, leaves: list[np.ndarray]) -> Any:
    if isinstance(template, dict):
        return dict(zip(sorted(template), leaves))
    if isinstance(template, (list, tuple)):
        return type(template)(leaves)
    return leaves[0]


def _is_round_robin_split(counts: list[int]) -> bool:
    """Whether ``counts`` are the shares of a round-robin deal of ``sum(counts)`` records."""
    total, ranks = sum(counts), len(counts)
    return all(count == (total - rank + ranks - 1) // ranks for rank, count in enumerate(counts))


def _interleave_arrays(arrays: Sequence[np.ndarray]):
    if len({array.shape[1:] for array in arrays}) != 1 or len({array.dtype for array in arrays}) != 1:
        return None
    combined = np.empty((sum(len(a) for a in arrays),) + arrays[0].shape[1:], dtype=arrays[0].dtype)
    for rank, array in enumerate(arrays):
        combined[rank :: len(arrays)] = array
    return combined
