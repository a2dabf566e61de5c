"""The experiment config's error class and the shapes of its messages.

Every message starts with ``experiment config:`` and names the offending key by
its full dotted path (``searcher.max_length.batches``, ``labels[2]``), so that a
user can find it in a long YAML file without reading any code.
"""

import difflib
from collections.abc import Iterable
from typing import Any

from det_estimator.errors import DetEstimatorError

PREFIX = "experiment config: "

# A whole `data` section or a long list in an error message would bury the point.
_MAX_REPR_CHARS = 200


class ConfigError(DetEstimatorError, ValueError):
    """An experiment config that is not valid.

    The message names the key's full dotted path, what was expected and what
    was received.
    """


def describe(value: Any) -> str:
    """Formats a received value for a message: its repr and its type name.

    Args:
        value: The value found in the config.

    Returns:
        For example ``"0 (int)"`` or ``"'model_def.MyTrial' (str)"``.
    """
    text = repr(value)
    if len(text) > _MAX_REPR_CHARS:
        text = text[: _MAX_REPR_CHARS - 3] + "..."
    return f"{text} ({type(value).__name__})"


def invalid_value(path: str, rule: str, value: Any) -> ConfigError:
    """Builds the error for a key whose value breaks a rule.

    Args:
        path: Full dotted path of the key.
        rule: What the value must be, e.g. "a positive integer".
        value: The value received.

    Returns:
        The error, ready to raise.
    """
    return ConfigError(f"{PREFIX}`{path}` must be {rule}. Received: {describe(value)}")


def missing_key(path: str, rule: str) -> ConfigError:
    """Builds the error for a required key that is absent (or null).

    Args:
        path: Full dotted path of the key.
        rule: What the value must be.

    Returns:
        The error, ready to raise.
    """
    return ConfigError(f"{PREFIX}missing required key `{path}`, which must be {rule}.")


def unknown_key(path: str, expected: Iterable[str]) -> ConfigError:
    """Builds the error for a key the section does not have.

    Args:
        path: Full dotted path of the key.
        expected: The keys the section accepts.

    Returns:
        The error, ready to raise; it suggests the accepted key nearest a misspelt one.
    """
    expected = sorted(expected)
    nearest = difflib.get_close_matches(path.rsplit(".", 1)[-1], expected, n=1, cutoff=0.8)
    suggestion = f" (did you mean `{nearest[0]}`?)" if nearest else ""
    return ConfigError(f"{PREFIX}unknown key `{path}`{suggestion}. Expected one of: {', '.join(expected)}")


def not_supported_yet(path: str, supported: Iterable[str]) -> ConfigError:
    """Builds the error for a key of the reference format that is not implemented yet.

    Args:
        path: Full dotted path of the key.
        supported: The keys the section accepts.

    Returns:
        The error, ready to raise.
    """
    return ConfigError(
        f"{PREFIX}key `{path}` is not supported yet. Remove it; supported keys: {', '.join(sorted(supported))}"
    )


def non_string_key(path: str, key: Any) -> ConfigError:
    """Builds the error for a mapping key that is not a string (YAML allows ``1: x``).

    Args:
        path: Full dotted path of the mapping.
        key: The offending key.

    Returns:
        The error, ready to raise.
    """
    return ConfigError(f"{PREFIX}`{path}` must have string keys. Received key: {describe(key)}")
