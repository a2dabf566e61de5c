"""Whether a ``tf.data.Dataset`` was built from one of some given datasets."""

from collections.abc import Container
from typing import Any


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
