"""The ``searcher`` section. Only the ``single`` searcher (one trial) is implemented."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det_estimator.config._errors import PREFIX, ConfigError, describe, invalid_value, missing_key
from det_estimator.config._fields import MAPPING_RULE, check_keys, join, lookup, read_bool, read_str
from det_estimator.config._lengths import Length, parse_length

SINGLE = "single"

_KEYS = ("name", "metric", "smaller_is_better", "max_length")
# Keys of the other searchers that make no sense for a searcher that runs one trial.
_MULTI_TRIAL_KEYS = ("max_trials", "max_concurrent_trials")


@dataclass(frozen=True)
class SearcherConfig:
    """The validated ``searcher`` section.

    Attributes:
        name: The searcher; always "single" for now.
        metric: Name of the validation metric that ranks checkpoints.
        smaller_is_better: Whether a smaller ``metric`` is better.
        max_length: How long the trial trains.
    """

    name: str
    metric: str
    smaller_is_better: bool
    max_length: Length

    def to_dict(self) -> dict[str, Any]:
        """Returns the section with defaults filled in, JSON-serializable."""
        return {
            "name": self.name,
            "metric": self.metric,
            "smaller_is_better": self.smaller_is_better,
            "max_length": self.max_length.to_dict(),
        }


def _read_name(section: Mapping[str, Any], path: str) -> str:
    rule = f'"{SINGLE}"'
    name = lookup(section, "name", path, rule)
    if isinstance(name, str) and name != SINGLE:
        rule = f'"{SINGLE}" (the "{name}" searcher is not supported yet)'
    if name != SINGLE:
        raise invalid_value(join(path, "name"), rule, name)
    return name


def parse_searcher(value: Any, path: str) -> SearcherConfig:
    """Validates the ``searcher`` section.

    Args:
        value: The raw section.
        path: Its dotted path (``searcher``).

    Returns:
        The searcher config.

    Raises:
        ConfigError: If the section is missing or invalid, names a searcher
            other than ``single``, or has a key that only multi-trial searchers take.
    """
    if value is None:
        raise missing_key(path, MAPPING_RULE)
    if not isinstance(value, Mapping):
        raise invalid_value(path, MAPPING_RULE, value)
    # The name decides which keys are valid, so it is checked first.
    name = _read_name(value, path)
    for key in _MULTI_TRIAL_KEYS:
        if key in value:
            raise ConfigError(
                f"{PREFIX}`{join(path, key)}` is not supported by the `{SINGLE}` searcher, which runs exactly "
                f"one trial; remove it. Received: {describe(value[key])}"
            )
    check_keys(value, path, _KEYS)
    length_path = join(path, "max_length")
    return SearcherConfig(
        name=name,
        metric=read_str(value, "metric", path, non_empty=True),
        smaller_is_better=read_bool(value, "smaller_is_better", path, default=True),
        max_length=parse_length(lookup(value, "max_length", path, "a length such as {batches: 1000}"), length_path),
    )
