"""Training lengths: ``{batches: N}``, ``{records: N}`` or ``{epochs: N}``."""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det_estimator.config._errors import PREFIX, ConfigError, invalid_value
from det_estimator.config._fields import check_int, check_keys, join


class LengthUnit(enum.Enum):
    """The unit a :class:`Length` is given in."""

    BATCHES = "batches"
    RECORDS = "records"
    EPOCHS = "epochs"


_UNIT_NAMES = tuple(unit.value for unit in LengthUnit)
_LENGTH_RULE = "a mapping with exactly one of the keys batches, epochs or records, e.g. {batches: 1000}"


@dataclass(frozen=True)
class Length:
    """A training length, as given in the experiment config.

    Attributes:
        unit: The unit it is given in.
        value: How many units; a positive integer.
    """

    unit: LengthUnit
    value: int

    def to_batches(self, global_batch_size: int, records_per_epoch: int = 0) -> int:
        """Converts the length to a number of batches, as the reference system does.

        Records and epochs are rounded down to whole batches, but never to
        fewer than one batch.

        Args:
            global_batch_size: Records per batch, summed over all slots.
            records_per_epoch: Records in one epoch; needed for lengths in epochs.

        Returns:
            ``value`` for batches, ``max(1, value // global_batch_size)`` for
            records, ``max(1, value * records_per_epoch // global_batch_size)``
            for epochs.

        Raises:
            ValueError: If ``global_batch_size`` is not positive, or the length
                is in epochs and ``records_per_epoch`` is not positive.
        """
        if global_batch_size < 1:
            raise ValueError(f"global_batch_size must be a positive integer. Received: {global_batch_size!r}")
        if self.unit is LengthUnit.BATCHES:
            return self.value
        if self.unit is LengthUnit.RECORDS:
            return max(1, self.value // global_batch_size)
        if records_per_epoch < 1:
            raise ValueError(
                f"A length in epochs needs records_per_epoch to be a positive integer. Received: {records_per_epoch!r}"
            )
        return max(1, self.value * records_per_epoch // global_batch_size)

    def to_dict(self) -> dict[str, int]:
        """Returns the length as it is written in the config, e.g. ``{"batches": 100}``."""
        return {self.unit.value: self.value}


def parse_length(value: Any, path: str) -> Length:
    """Validates a length from the config.

    Args:
        value: The raw value, e.g. ``{"epochs": 3}``.
        path: Its dotted path, e.g. ``searcher.max_length``.

    Returns:
        The length.

    Raises:
        ConfigError: If the value is not a mapping with exactly one unit key
            whose value is a positive integer.
    """
    if not isinstance(value, Mapping):
        raise invalid_value(path, _LENGTH_RULE, value)
    check_keys(value, path, _UNIT_NAMES)
    if len(value) != 1:
        raise invalid_value(path, _LENGTH_RULE, value)
    ((unit, amount),) = value.items()
    return Length(LengthUnit(unit), check_int(amount, join(path, unit), minimum=1))


def check_epochs_allowed(length: Length, path: str, records_per_epoch: int) -> None:
    """Rejects a length in epochs when the config does not say how long an epoch is.

    Args:
        length: The length.
        path: Its dotted path.
        records_per_epoch: The config's ``records_per_epoch``.

    Raises:
        ConfigError: If the length is in epochs and ``records_per_epoch`` is 0.
    """
    if length.unit is LengthUnit.EPOCHS and records_per_epoch < 1:
        # 0 is what the config holds when it does not set records_per_epoch at all.
        received = "it has none" if records_per_epoch == 0 else f"Received: records_per_epoch={records_per_epoch}"
        raise ConfigError(
            f"{PREFIX}`{path}` is given in epochs, which needs `records_per_epoch` (a positive integer) "
            f"in the experiment config; {received}."
        )
