"""The small sections: ``resources``, ``optimizations`` and ``reproducibility``."""

import time
from dataclasses import asdict, dataclass
from typing import Any

from det_estimator.config._fields import as_mapping, check_keys, read_bool, read_int

MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class ResourcesConfig:
    """The validated ``resources`` section.

    Attributes:
        slots_per_trial: Number of worker processes (Horovod ranks) of the trial.
    """

    slots_per_trial: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the section with defaults filled in, JSON-serializable."""
        return asdict(self)


@dataclass(frozen=True)
class OptimizationsConfig:
    """The validated ``optimizations`` section.

    Attributes:
        aggregation_frequency: Batches whose gradients are aggregated locally
            before one exchange between workers.
        average_aggregated_gradients: Whether the aggregated gradients are
            averaged over ``aggregation_frequency`` rather than summed.
        gradient_compression: Whether gradients are compressed to float16 for the exchange.
        average_training_metrics: Whether training metrics are averaged over
            all workers rather than reported by the chief alone.
    """

    aggregation_frequency: int
    average_aggregated_gradients: bool
    gradient_compression: bool
    average_training_metrics: bool

    def to_dict(self) -> dict[str, Any]:
        """Returns the section with defaults filled in, JSON-serializable."""
        return asdict(self)


@dataclass(frozen=True)
class ReproducibilityConfig:
    """The validated ``reproducibility`` section.

    Attributes:
        experiment_seed: Seed of the experiment, in ``[0, 2**31)``; when the
            config gives none, one derived from the time of loading.
    """

    experiment_seed: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the section with the seed actually used, JSON-serializable."""
        return asdict(self)


_RESOURCES_NOT_SUPPORTED = (
    "agent_label",
    "devices",
    "is_single_node",
    "max_slots",
    "native_parallel",
    "priority",
    "resource_pool",
    "shm_size",
    "slots",
    "weight",
)
_OPTIMIZATIONS_NOT_SUPPORTED = (
    "auto_tune_tensor_fusion",
    "mixed_precision",
    "tensor_fusion_cycle_time",
    "tensor_fusion_threshold",
)


def parse_resources(value: Any, path: str) -> ResourcesConfig:
    """Validates the ``resources`` section.

    Args:
        value: The raw section, or None for the defaults.
        path: Its dotted path (``resources``).

    Returns:
        The resources config.

    Raises:
        ConfigError: If the section is invalid.
    """
    section = as_mapping(value, path)
    check_keys(section, path, ("slots_per_trial",), _RESOURCES_NOT_SUPPORTED)
    return ResourcesConfig(slots_per_trial=read_int(section, "slots_per_trial", path, minimum=1, default=1))


def parse_optimizations(value: Any, path: str) -> OptimizationsConfig:
    """Validates the ``optimizations`` section.

    Args:
        value: The raw section, or None for the defaults.
        path: Its dotted path (``optimizations``).

    Returns:
        The optimizations config.

    Raises:
        ConfigError: If the section is invalid.
    """
    section = as_mapping(value, path)
    keys = ("aggregation_frequency", "average_aggregated_gradients", "gradient_compression", "average_training_metrics")
    check_keys(section, path, keys, _OPTIMIZATIONS_NOT_SUPPORTED)
    return OptimizationsConfig(
        aggregation_frequency=read_int(section, "aggregation_frequency", path, minimum=1, default=1),
        average_aggregated_gradients=read_bool(section, "average_aggregated_gradients", path, default=True),
        gradient_compression=read_bool(section, "gradient_compression", path, default=False),
        average_training_metrics=read_bool(section, "average_training_metrics", path, default=True),
    )


def parse_reproducibility(value: Any, path: str) -> ReproducibilityConfig:
    """Validates the ``reproducibility`` section, choosing a seed when it gives none.

    The chosen seed is the current time in milliseconds modulo ``2**31``, so
    loading the same seedless config twice gives two different seeds: load it
    once and pass the result (or its ``to_dict()``) on.

    Args:
        value: The raw section, or None for the defaults.
        path: Its dotted path (``reproducibility``).

    Returns:
        The reproducibility config.

    Raises:
        ConfigError: If the section is invalid.
    """
    section = as_mapping(value, path)
    check_keys(section, path, ("experiment_seed",))
    seed = read_int(section, "experiment_seed", path, minimum=0, maximum=MAX_SEED, default=None)
    if seed is None:
        seed = time.time_ns() // 1_000_000 % (MAX_SEED + 1)
    return ReproducibilityConfig(experiment_seed=seed)
