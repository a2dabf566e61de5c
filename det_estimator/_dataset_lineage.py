"""Whether a ``tf.data.Dataset`` was built from one of some given datasets."""

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


def refuse_sharding_a_share(dataset: Any, shares: Container[Any]) -> None:
    """Raises if ``dataset`` was built from one of ``shares``, the datasets that are already one process's share.

    A dataset that ``wrap_dataset`` sharded, or that a dataset cache read, holds this
    process's round-robin share: sharding it again would leave each process a fraction
    of its records, and the processes together a fraction of the data, silently.

    Raises:
        TrialDefinitionError: it was.
    """
    if built_from(dataset, shares):
        raise TrialDefinitionError(
            "Argument `dataset` must be a dataset that is not yet this process's share. Received one built from "
            "a dataset that context.wrap_dataset() or a context.experimental.cache_train_dataset / "
            "cache_validation_dataset function returned, which each process already reads its own round-robin "
            "shard of: wrapping it again would shard it again, and the processes would train or validate on a "
            "fraction of the data. Use it without wrapping it again (or pass shard_dataset=False)."
        )
