"""Experiment configs: the reference system's YAML format, validated once into immutable objects.

Typical use::

    from det_estimator.config import load_experiment_config

    config = load_experiment_config("const.yaml")
    hparams = config.sample_hyperparameters(config.reproducibility.experiment_seed)

Keys that the reference format has but det-estimator does not implement yet are
rejected with a message that says so; unknown keys are rejected too. Keys that matter
only on a cluster (a container image, bind mounts, a workspace...) are accepted and
ignored, with one :class:`ClusterKeysIgnoredWarning` naming them; a form of the reference's
that det-estimator maps to its own is noted with a :class:`ReferenceFormMappedWarning`. Every
error is a :class:`ConfigError` whose message names the key's dotted path.
"""

from det_estimator.config._checkpoint_storage import CheckpointStorageConfig
from det_estimator.config._environment import (
    ClusterKeysIgnoredWarning,
    ConfigNoteWarning,
    EnvironmentConfig,
    ReferenceFormMappedWarning,
    load_environment,
)
from det_estimator.config._errors import ConfigError
from det_estimator.config._experiment_config import ExperimentConfig, load_experiment_config
from det_estimator.config._hyperparameters import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    Hyperparameter,
    IntHyperparameter,
    LogHyperparameter,
    grid_point,
    grid_size,
)
from det_estimator.config._lengths import Length, LengthUnit
from det_estimator.config._searcher import AshaBracket, SearcherConfig, searcher_key
from det_estimator.config._sections import OptimizationsConfig, ReproducibilityConfig, ResourcesConfig

__all__ = [
    "AshaBracket",
    "CategoricalHyperparameter",
    "CheckpointStorageConfig",
    "ClusterKeysIgnoredWarning",
    "ConfigError",
    "ConfigNoteWarning",
    "ConstHyperparameter",
    "DoubleHyperparameter",
    "EnvironmentConfig",
    "ExperimentConfig",
    "Hyperparameter",
    "IntHyperparameter",
    "Length",
    "LengthUnit",
    "LogHyperparameter",
    "OptimizationsConfig",
    "ReferenceFormMappedWarning",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "SearcherConfig",
    "grid_point",
    "grid_size",
    "load_environment",
    "load_experiment_config",
    "searcher_key",
]
