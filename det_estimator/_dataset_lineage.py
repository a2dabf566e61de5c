"""Whether a ``tf.data.Dataset`` was built from given datasets, and the one rule that takes a process's share of one."""

import weakref
from collections.abc import Container
from typing import Any

from det_estimator.errors import TrialDefinitionError


def built_from(dataset: Any, sources: Container[Any]) -> bool:
    """Whether ``dataset`` is one of ``sources`` or was built from one (batched, mapped, zipped, ...).

    Walks the datasets each was made from through TensorFlow's ``_inputs()``: the
    transformations a user applies after a wrap keep the wrapped dataset among them.
    """
    seen, pending = set(), [dataset]
    while pending:
        current = pending.pop()
        if current in sources:
            return True
        if id(current) not in seen:
            seen.add(id(current))
            pending.extend(current._inputs())  # the datasets it was built from
    return False


class DatasetShares:
    """One process's round-robin shares of ``tf.data.Dataset`` records, and the datasets it handed out.

    The one rule by which every front door (a trial's ``context.wrap_dataset``,
    ``det.keras.init()``'s ``context.wrap_data``) gives a process its share of a dataset:
    process ``rank`` of ``size`` keeps records ``rank``, ``rank + size``, ... A dataset
    built from a share (or from what a dataset cache read, also one process's share) is
    refused: sharding it again would leave each process a fraction of its records, and
    the processes together a fraction of the data, silently. On one process nothing is
    cut, and wrapping twice loses nothing.

    The sets are weak, as each ``input_fn`` builds a new graph.

    Args:
        rank: this process's rank.
        size: how many processes share the data.
    """

    def __init__(self, rank: int, size: int) -> None:
        self._rank = rank
        self._size = size
        self._shares: weakref.WeakSet[Any] = weakref.WeakSet()  # cut by this process (on several processes)
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()  # every dataset returned or read from a cache

    def share_of(self, dataset: Any, shard: bool = True) -> Any:
        """This process's share of ``dataset`` (``dataset`` itself on one process or when ``shard`` is False).

        Raises:
            TrialDefinitionError: ``dataset`` was built from a share already.
        """
        if shard and built_from(dataset, self._shares):
            raise TrialDefinitionError(
                "Argument `dataset` must be a dataset that is not yet this process's share. Received one built "
                "from a dataset that context.wrap_dataset() or context.wrap_data() or a "
                "context.experimental.cache_train_dataset / cache_validation_dataset function returned, which "
                "each process already reads its own round-robin shard of: wrapping it again would shard it again, "
                "and the processes would train or validate on a fraction of the data. Use it without wrapping it "
                "again (or pass shard_dataset=False)."
            )
        if shard and self._size > 1:
            dataset = dataset.shard(self._size, self._rank)
            self._shares.add(dataset)
        self._handed_out.add(dataset)
        return dataset

    def add_cached(self, dataset: Any) -> Any:
        """Records ``dataset``, read from a dataset cache, as this process's share (caches shard as above)."""
        self._shares.add(dataset)
        self._handed_out.add(dataset)
        return dataset

    def handed_out(self, dataset: Any) -> bool:
        """Whether ``dataset`` is, or was built from, one that :meth:`share_of` returned or a cache read."""
        return built_from(dataset, self._handed_out)
