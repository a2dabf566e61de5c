"""Names that become directory names: serving exports and dataset cache entries."""

import re
from typing import Any

_DIRECTORY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# How error messages state the rule, after "must".
DIRECTORY_NAME_RULE = "start with a letter or digit and contain only letters, digits, '_', '.' and '-'"


def is_directory_name(value: Any) -> bool:
    """Whether ``value`` can safely name a directory (no separators, no leading dot)."""
    return isinstance(value, str) and _DIRECTORY_NAME.match(value) is not None
