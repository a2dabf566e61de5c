"""Free-form config values (``data``, plain hyperparameters): checked, frozen and thawed.

A frozen value holds tuples instead of lists and read-only mappings instead of
dicts, so the validated config cannot be changed behind its back; thawing gives
a fresh, mutable, JSON-serializable copy to hand to user code.
"""

import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from det_estimator.config._errors import PREFIX, ConfigError, invalid_value, non_string_key
from det_estimator.config._fields import join

# As for a YAML file (det_estimator/config/_source.py): deeper is a mistake, or a value that contains itself.
MAX_DEPTH = 100
_JSON_RULE = "a JSON value (null, a boolean, a number, a string, a list or a mapping)"


def too_deep(path: str) -> ConfigError:
    """The error for a value nested more than ``MAX_DEPTH`` levels deep at ``path`` (shortened)."""
    shown = path if len(path) <= 60 else path[:57] + "..."
    return ConfigError(
        f"{PREFIX}`{shown}` nests lists and mappings more than {MAX_DEPTH} levels deep (or contains itself). "
        "Expected a value of ordinary shape; keep deeply nested data in files that the trial reads."
    )


def freeze(value: Any, path: str, depth: int = 0) -> Any:
    """Checks that a value is JSON-compatible and returns an immutable copy of it.

    YAML also produces dates and timestamps; they are rejected because the
    config is stored as JSON in checkpoint metadata.

    Args:
        value: The value.
        path: Its dotted path.
        depth: How many lists and mappings it is inside of (0 at the top).

    Returns:
        The value with lists as tuples, mappings as read-only mappings and
        numeric types (e.g. NumPy scalars) as Python ints and floats.

    Raises:
        ConfigError: If the value, or anything inside it, is not JSON-compatible, or it
            nests lists and mappings more than ``MAX_DEPTH`` levels deep (a mapping that
            contains itself does so without end).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple, Mapping)) and depth >= MAX_DEPTH:
        # Not shown: the repr of such a value may itself be endless or too deep.
        raise too_deep(path)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item, join(path, index), depth + 1) for index, item in enumerate(value))
    if isinstance(value, Mapping):
        return freeze_mapping(value, path, depth)
    raise invalid_value(path, _JSON_RULE, value)


def freeze_mapping(value: Mapping[Any, Any], path: str, depth: int = 0) -> Mapping[str, Any]:
    """Freezes a mapping whose values are JSON-compatible.

    Args:
        value: The mapping.
        path: Its dotted path.
        depth: How many lists and mappings it is inside of (0 at the top).

    Returns:
        A read-only mapping of frozen values.

    Raises:
        ConfigError: If a key is not a string or a value is not JSON-compatible.
    """
    frozen = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise non_string_key(path, key)
        frozen[key] = freeze(item, join(path, key), depth + 1)
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
