"""Free-form config values (``data``, plain hyperparameters): checked, frozen and thawed.

A frozen value holds tuples instead of lists and read-only mappings instead of
dicts, so the validated config cannot be changed behind its back; thawing gives
a fresh, mutable, JSON-serializable copy to hand to user code.
"""

import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from det_estimator.config._errors import invalid_value, non_string_key
from det_estimator.config._fields import join

_JSON_RULE = "a JSON value (null, a boolean, a number, a string, a list or a mapping)"


def freeze(value: Any, path: str) -> Any:
    """Checks that a value is JSON-compatible and returns an immutable copy of it.

    YAML also produces dates and timestamps; they are rejected because the
    config is stored as JSON in checkpoint metadata.

    Args:
        value: The value.
        path: Its dotted path.

    Returns:
        The value with lists as tuples, mappings as read-only mappings and
        numeric types (e.g. NumPy scalars) as Python ints and floats.

    Raises:
        ConfigError: If the value, or anything inside it, is not JSON-compatible.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item, join(path, index)) for index, item in enumerate(value))
    if isinstance(value, Mapping):
        return freeze_mapping(value, path)
    raise invalid_value(path, _JSON_RULE, value)


def freeze_mapping(value: Mapping[Any, Any], path: str) -> Mapping[str, Any]:
    """Freezes a mapping whose values are JSON-compatible.

    Args:
        value: The mapping.
        path: Its dotted path.

    Returns:
        A read-only mapping of frozen values.

    Raises:
        ConfigError: If a key is not a string or a value is not JSON-compatible.
    """
    frozen = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise non_string_key(path, key)
        frozen[key] = freeze(item, join(path, key))
    return MappingProxyType(frozen)


def thaw(value: Any) -> Any:
    """Returns a mutable deep copy of a frozen value (tuples to lists, mappings to dicts).

    Args:
        value: A value returned by :func:`freeze`.

    Returns:
        The plain, JSON-serializable value.
    """
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    return value
