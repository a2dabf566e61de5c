"""Typed reading of single config keys, each raising a :class:`ConfigError` on a bad value.

A key whose value is null counts as absent, as in the reference format, where
every optional key also accepts null to mean "use the default".
"""

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from det_estimator.config._errors import invalid_value, missing_key, not_supported_yet, unknown_key

# Marks a key that has no default: reading it when absent is an error.
REQUIRED: Any = object()

MAPPING_RULE = "a mapping of keys to values"

# The range of a 64-bit signed integer: SQLite's INTEGER and TensorFlow's int64.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def join(path: str, key: Union[str, int]) -> str:
    """Extends a dotted path by a key or a list index.

    Args:
        path: The parent's path; "" for the top level.
        key: A mapping key, or an index into a list.

    Returns:
        For example ``searcher.max_length`` or ``labels[2]``.
    """
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_keys(
    section: Mapping[Any, Any], path: str, supported: Iterable[str], not_supported: Iterable[str] = ()
) -> None:
    """Rejects every key that is neither supported nor a known, not yet implemented key.

    Keys are checked in the section's own order, so the error points at the
    first offending line of the file.

    Args:
        section: The mapping to check.
        path: Its dotted path; "" for the top level.
        supported: The keys it may have.
        not_supported: Keys of the reference format that are not implemented yet.

    Raises:
        ConfigError: For the first key that is not supported.
    """
    supported = tuple(supported)
    not_supported = tuple(not_supported)
    for key in section:
        if key in supported:
            continue
        if key in not_supported:
            raise not_supported_yet(join(path, key), supported)
        raise unknown_key(join(path, str(key)), supported)


def lookup(section: Mapping[str, Any], key: str, path: str, rule: str, default: Any = REQUIRED) -> Any:
    """Returns a key's value, its default when absent or null, or raises if it is required.

    Args:
        section: The mapping holding the key.
        key: The key.
        path: The mapping's dotted path.
        rule: What the value must be, for the message when it is missing.
        default: The value of an absent key; ``REQUIRED`` if it must be given.

    Returns:
        The value, or the default.

    Raises:
        ConfigError: If the key is required and absent or null.
    """
    value = section.get(key)
    if value is not None:
        return value
    if default is REQUIRED:
        raise missing_key(join(path, key), rule)
    return default


def as_mapping(value: Any, path: str) -> Mapping[str, Any]:
    """Checks that a section is a mapping; null gives an empty one.

    Args:
        value: The section's value.
        path: Its dotted path.

    Returns:
        The mapping.

    Raises:
        ConfigError: If the value is neither a mapping nor null.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid_value(path, MAPPING_RULE, value)
    return value


def int_rule(minimum: Optional[int], maximum: Optional[int] = None) -> str:
    """Describes an integer range in words, for messages.

    Args:
        minimum: The smallest allowed value, or None.
        maximum: The largest allowed value, or None.

    Returns:
        For example "a positive integer".
    """
    if maximum is not None:
        return f"an integer from {minimum} to {maximum}"
    return {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}"
    )


def check_int(value: Any, path: str, minimum: Optional[int] = None, maximum: Optional[int] = None) -> int:
    """Checks that a value is an integer in range; booleans are rejected.

    Args:
        value: The value.
        path: Its dotted path.
        minimum: The smallest allowed value, or None.
        maximum: The largest allowed value, or None.

    Returns:
        The value as a Python int.

    Raises:
        ConfigError: If the value is not an integer or is out of range.
    """
    # bool is a subclass of int: `scheduling_unit: true` must not mean 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise invalid_value(path, int_rule(minimum, maximum), value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise invalid_value(path, int_rule(minimum, maximum), value)
    # Counts, lengths and ids end up in the store's INTEGER columns and in TensorFlow's
    # int64 tensors, which hold no more: a larger value would fail there, after recording.
    if not INT64_MIN <= value <= INT64_MAX:
        bounds = "from -2**63 to 2**63 - 1" if minimum is None else "of at most 2**63 - 1"
        raise invalid_value(path, f"{int_rule(minimum, maximum)} {bounds}", value)
    return int(value)


def read_int(
    section: Mapping[str, Any],
    key: str,
    path: str,
    *,
    minimum: Optional[int] = None,
    maximum: Optional[int] = None,
    default: Any = REQUIRED,
) -> Any:
    """Reads an integer key.

    Args:
        section: The mapping holding the key.
        key: The key.
        path: The mapping's dotted path.
        minimum: The smallest allowed value, or None.
        maximum: The largest allowed value, or None.
        default: The value of an absent key (returned unchecked); ``REQUIRED`` if it must be given.

    Returns:
        The integer, or the default.

    Raises:
        ConfigError: If the key is missing though required, or its value is not an integer in range.
    """
    value = section.get(key)
    if value is None:
        return lookup(section, key, path, int_rule(minimum, maximum), default)
    return check_int(value, join(path, key), minimum, maximum)


def check_number(value: Any, path: str) -> float:
    """Checks that a value is a finite real number; booleans are rejected.

    Args:
        value: The value.
        path: Its dotted path.

    Returns:
        The value as a float.

    Raises:
        ConfigError: If the value is not a finite number.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise invalid_value(path, "a finite number", value)
    return float(value)


def read_number(section: Mapping[str, Any], key: str, path: str) -> float:
    """Reads a required, finite number.

    Args:
        section: The mapping holding the key.
        key: The key.
        path: The mapping's dotted path.

    Returns:
        The number as a float.

    Raises:
        ConfigError: If the key is missing or its value is not a finite number.
    """
    return check_number(lookup(section, key, path, "a finite number"), join(path, key))


def read_bool(section: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
    """Reads an optional boolean key.

    Args:
        section: The mapping holding the key.
        key: The key.
        path: The mapping's dotted path.
        default: The value of an absent key.

    Returns:
        The boolean.

    Raises:
        ConfigError: If the value is not a boolean.
    """
    value = lookup(section, key, path, "a boolean", default)
    if not isinstance(value, bool):
        raise invalid_value(join(path, key), "a boolean (true or false)", value)
    return value


def read_str(
    section: Mapping[str, Any], key: str, path: str, *, default: Any = REQUIRED, non_empty: bool = False
) -> str:
    """Reads a string key.

    Args:
        section: The mapping holding the key.
        key: The key.
        path: The mapping's dotted path.
        default: The value of an absent key; ``REQUIRED`` if it must be given.
        non_empty: Whether the empty string is rejected.

    Returns:
        The string.

    Raises:
        ConfigError: If the key is missing though required, or its value is not a (non-empty) string.
    """
    rule = "a non-empty string" if non_empty else "a string"
    value = lookup(section, key, path, rule, default)
    if not isinstance(value, str) or (non_empty and not value):
        raise invalid_value(join(path, key), rule, value)
    return value


def read_choice(section: Mapping[str, Any], key: str, path: str, choices: Iterable[str], *, default: str) -> str:
    """Reads an optional key whose value is one of a few strings.

    Args:
        section: The mapping holding the key.
        key: The key.
        path: The mapping's dotted path.
        choices: The allowed values.
        default: The value of an absent key.

    Returns:
        The chosen string.

    Raises:
        ConfigError: If the value is not one of the choices.
    """
    choices = tuple(choices)
    rule = f"one of: {', '.join(sorted(choices))}"
    value = lookup(section, key, path, rule, default)
    if not isinstance(value, str) or value not in choices:
        raise invalid_value(join(path, key), rule, value)
    return value
