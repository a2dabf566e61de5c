"""The validated experiment config and :func:`load_experiment_config`, its only constructor in practice."""

import dataclasses
import keyword
import math
import shlex
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from det_estimator.config._checkpoint_storage import CheckpointStorageConfig, parse_checkpoint_storage
from det_estimator.config._environment import (
    EnvironmentConfig,
    ReferenceFormMappedWarning,
    cluster_only_keys,
    note_once,
    parse_environment,
    parse_hang_timeout_seconds,
    parse_max_restarts,
    warn_ignored,
)
from det_estimator.config._errors import PREFIX, ConfigError, describe, invalid_value
from det_estimator.config._fields import (
    INT64_MAX,
    MAPPING_RULE,
    check_int,
    check_keys,
    join,
    lookup,
    read_bool,
    read_choice,
    read_int,
    read_str,
)
from det_estimator.config._hyperparameters import (
    GLOBAL_BATCH_SIZE,
    check_global_batch_size,
    grid_counts,
    hyperparameters_to_dict,
    parse_hyperparameters,
    sample_hyperparameters,
)
from det_estimator.config._json_values import freeze_mapping, thaw
from det_estimator.config._lengths import Length, check_epochs_allowed, parse_length
from det_estimator.config._searcher import SearcherConfig, parse_searcher
from det_estimator.config._sections import (
    OptimizationsConfig,
    ReproducibilityConfig,
    ResourcesConfig,
    parse_optimizations,
    parse_reproducibility,
    parse_resources,
)
from det_estimator.config._source import ConfigSource, read_source

CHECKPOINT_POLICIES = ("best", "all", "none")
# The most trials a grid search may create, as in the reference system: past a few
# thousand, a grid is no longer a search anyone finishes on one machine, and a typo in a
# `count` (or one hyperparameter too many) should be said at once, not found days later.
MAX_GRID_TRIALS = 2000

_TOP_LEVEL_KEYS = (
    "entrypoint",
    "entrypoint_script",
    "name",
    "description",
    "labels",
    "data",
    "hyperparameters",
    "searcher",
    "records_per_epoch",
    "scheduling_unit",
    "min_validation_period",
    "min_checkpoint_period",
    "perform_initial_validation",
    "checkpoint_policy",
    "checkpoint_storage",
    "resources",
    "optimizations",
    "reproducibility",
    "max_restarts",
    "hang_timeout_seconds",
    "environment",
)
# The reference format's other top-level keys matter only on a cluster: they are accepted
# with a warning (det_estimator/config/_environment.py), so none is refused as "not yet".
_ENTRYPOINT_RULE = '"module:TrialClass" (e.g. "model_def:MyTrial") or a command (e.g. "python3 train.py")'
_SCRIPT_RULE = 'a command, e.g. "python3 train.py"'
_GLOBAL_BATCH_SIZE_PATH = join("hyperparameters", GLOBAL_BATCH_SIZE)
# The reference system's launcher modules, and det-estimator's that do the same on its slots.
_REFERENCE_LAUNCHERS = {
    "determined.launch.horovod": "det_estimator.launch.horovod",
    "determined.launch.tensorflow": "det_estimator.launch.tensorflow",
}


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated, immutable experiment config. Build it with :func:`load_experiment_config`.

    Attributes:
        entrypoint_module: Dotted module path of the trial class ("" for a command).
        entrypoint_class: Name of the trial class in that module ("" for a command).
        entrypoint_command: The command a script experiment runs (``entrypoint: python3
            train.py`` or ``entrypoint_script``), split into words; empty for a trial class.
        name: Experiment name.
        description: Experiment description.
        labels: Experiment labels.
        data: The ``data`` section, read-only (lists as tuples); :meth:`data_dict`
            gives the plain dict handed to the trial.
        hyperparameters: Name to hyperparameter spec, or to a read-only mapping
            of the same kind for a nested group. A trial class needs
            ``global_batch_size``; a script may go without.
        searcher: The ``searcher`` section.
        records_per_epoch: Records in one epoch; 0 if not given.
        scheduling_unit: Batches per training workload.
        min_validation_period: How often to validate at least, or None.
        min_checkpoint_period: How often to checkpoint at least, or None.
        perform_initial_validation: Whether to validate before training.
        checkpoint_policy: "best", "all" or "none".
        checkpoint_storage: The ``checkpoint_storage`` section.
        resources: The ``resources`` section.
        optimizations: The ``optimizations`` section.
        reproducibility: The ``reproducibility`` section, with the seed actually used.
        max_restarts: How many times a failed trial is restarted from its latest
            checkpoint before it ends as ERROR (5, as the reference).
        hang_timeout_seconds: How long no process of a trial may make progress (a
            batch, a validation step, a checkpoint) before the trial is ended as hung
            (1800); 0 never ends one.
        environment: The ``environment`` section: the variables every worker process
            gets (its cluster-only keys are ignored with a warning).
    """

    entrypoint_module: str
    entrypoint_class: str
    entrypoint_command: tuple[str, ...]
    name: str
    description: str
    labels: tuple[str, ...]
    data: Mapping[str, Any]
    hyperparameters: Mapping[str, Any]
    searcher: SearcherConfig
    records_per_epoch: int
    scheduling_unit: int
    min_validation_period: Optional[Length]
    min_checkpoint_period: Optional[Length]
    perform_initial_validation: bool
    checkpoint_policy: str
    checkpoint_storage: CheckpointStorageConfig
    resources: ResourcesConfig
    optimizations: OptimizationsConfig
    reproducibility: ReproducibilityConfig
    max_restarts: int
    hang_timeout_seconds: int
    environment: EnvironmentConfig

    @property
    def entrypoint(self) -> str:
        """The entrypoint as written in the config: ``"module:TrialClass"`` or the command."""
        if self.entrypoint_command:
            return shlex.join(self.entrypoint_command)
        return f"{self.entrypoint_module}:{self.entrypoint_class}"

    @property
    def is_script(self) -> bool:
        """Whether the entrypoint is a command (a script on the Core API) rather than a trial class."""
        return bool(self.entrypoint_command)

    def data_dict(self) -> dict[str, Any]:
        """Returns a fresh, mutable copy of the ``data`` section, as handed to the trial."""
        return thaw(self.data)

    def sample_hyperparameters(self, seed: int) -> dict[str, Any]:
        """Draws the hyperparameter values of one trial.

        Constants give their value; ``int`` a uniform integer in ``[minval,
        maxval]``; ``double`` a uniform float; ``log`` ``base ** x`` for a
        uniform ``x`` in ``[minval, maxval]``; ``categorical`` one of its values.
        Each hyperparameter draws from its own ``random.Random`` seeded with
        ``f"{seed}:{dotted name}"``, so the values depend only on the seed and
        the spec, on every process and platform.

        Args:
            seed: The trial's seed; the ``single`` searcher uses
                ``reproducibility.experiment_seed``.

        Returns:
            Name to value; nested groups give nested dicts.

        Raises:
            TypeError: If ``seed`` is not an int.
        """
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int. Received: {describe(seed)}")
        return sample_hyperparameters(self.hyperparameters, seed)

    def per_slot_batch_size(self, global_batch_size: int) -> int:
        """Splits a global batch size over ``resources.slots_per_trial`` slots.

        Args:
            global_batch_size: The trial's ``global_batch_size``.

        Returns:
            ``global_batch_size // slots_per_trial``. When the division is not
            exact, a warning says that the global batch size was rounded down.

        Raises:
            ConfigError: If ``global_batch_size`` is not a positive integer or
                is smaller than ``slots_per_trial``.
        """
        check_int(global_batch_size, _GLOBAL_BATCH_SIZE_PATH, minimum=1)
        slots = self.resources.slots_per_trial
        if global_batch_size < slots:
            raise _fewer_records_than_slots(global_batch_size, slots)
        per_slot = global_batch_size // slots
        if per_slot * slots != global_batch_size:
            warnings.warn(
                f"The global batch size {global_batch_size} is not divisible by resources.slots_per_trial ({slots}); "
                f"it was rounded down to {per_slot * slots} ({per_slot} per slot).",
                stacklevel=2,
            )
        return per_slot

    def with_overrides(
        self,
        *,
        slots: Optional[int] = None,
        seed: Optional[int] = None,
        max_length: Optional[Length] = None,
        records_per_epoch: Optional[int] = None,
        test: bool = False,
    ) -> "ExperimentConfig":
        """Returns this config with some keys replaced, validated as :func:`load_experiment_config` validates them.

        For what a command line or a front end sets on top of a config (``--slots``,
        ``--seed``, ``--test``), without writing the config out and loading it again.
        Each value is checked by the rules of its key, and the rules that span keys
        (lengths in epochs, the global batch size against the slots) are checked again.

        Args:
            slots: ``resources.slots_per_trial``.
            seed: ``reproducibility.experiment_seed``.
            max_length: ``searcher.max_length``.
            records_per_epoch: ``records_per_epoch``.
            test: the config ``--test`` runs: one trial of one batch, whatever the
                searcher (a ``single`` searcher of ``{batches: 1}``, with the same
                metric), as the reference's test mode; applied after ``max_length``.

        Returns:
            The new config; this one is unchanged.

        Raises:
            ConfigError: a value its key does not take, or one the other keys rule out
                (more slots than the global batch size, say); the message names the key.
        """
        changes: dict[str, Any] = {}
        if slots is not None:
            changes["resources"] = parse_resources({"slots_per_trial": slots}, "resources")
        if seed is not None:
            changes["reproducibility"] = parse_reproducibility({"experiment_seed": seed}, "reproducibility")
        if records_per_epoch is not None:
            changes["records_per_epoch"] = check_int(records_per_epoch, "records_per_epoch", minimum=0)
        searcher = self.searcher.to_dict()
        if max_length is not None:
            if not isinstance(max_length, Length):
                raise TypeError(f"Argument `max_length` must be a Length. Received: max_length={max_length!r}")
            searcher["max_length"] = max_length.to_dict()
        if test:
            searcher = {
                "name": "single",
                "metric": searcher["metric"],
                "smaller_is_better": searcher["smaller_is_better"],
                "max_length": {"batches": 1},
            }
        if max_length is not None or test:
            changes["searcher"] = parse_searcher(searcher, "searcher")
        config = dataclasses.replace(self, **changes)
        smallest_global_batch_size = None
        if GLOBAL_BATCH_SIZE in config.hyperparameters:
            raw = hyperparameters_to_dict(config.hyperparameters)
            smallest_global_batch_size = check_global_batch_size(raw, "hyperparameters")
        _check_consistency(config, smallest_global_batch_size)
        return config

    def to_dict(self) -> dict[str, Any]:
        """Returns the config with every default filled in, JSON-serializable.

        :func:`load_experiment_config` accepts the result and gives an equal config.
        """
        return {
            # A command as its list of words, which reads back the same even for one word.
            "entrypoint": list(self.entrypoint_command) if self.entrypoint_command else self.entrypoint,
            "name": self.name,
            "description": self.description,
            "labels": list(self.labels),
            "data": thaw(self.data),
            "hyperparameters": hyperparameters_to_dict(self.hyperparameters),
            "searcher": self.searcher.to_dict(),
            "records_per_epoch": self.records_per_epoch,
            "scheduling_unit": self.scheduling_unit,
            "min_validation_period": _length_to_dict(self.min_validation_period),
            "min_checkpoint_period": _length_to_dict(self.min_checkpoint_period),
            "perform_initial_validation": self.perform_initial_validation,
            "checkpoint_policy": self.checkpoint_policy,
            "checkpoint_storage": self.checkpoint_storage.to_dict(),
            "resources": self.resources.to_dict(),
            "optimizations": self.optimizations.to_dict(),
            "reproducibility": self.reproducibility.to_dict(),
            "max_restarts": self.max_restarts,
            "hang_timeout_seconds": self.hang_timeout_seconds,
            "environment": self.environment.to_dict(),
        }


def _length_to_dict(length: Optional[Length]) -> Optional[dict[str, int]]:
    return None if length is None else length.to_dict()


def _fewer_records_than_slots(global_batch_size: int, slots: int) -> ConfigError:
    return ConfigError(
        f"{PREFIX}`{_GLOBAL_BATCH_SIZE_PATH}` must be at least `resources.slots_per_trial` ({slots}), so that "
        f"every slot gets at least one record per batch. Received: {describe(global_batch_size)}"
    )


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _parse_entrypoint(raw: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """``(module, class, ())`` for a trial class, ``("", "", command words)`` for a command."""
    if "entrypoint_script" in raw:
        if "entrypoint" in raw:
            raise ConfigError(
                f"{PREFIX}give either `entrypoint` or `entrypoint_script`, not both. "
                f"Received: entrypoint={describe(raw['entrypoint'])}, "
                f"entrypoint_script={describe(raw['entrypoint_script'])}"
            )
        command = _parse_command(raw["entrypoint_script"], "entrypoint_script", _SCRIPT_RULE)
        return "", "", _own_launcher(command, raw["entrypoint_script"], "entrypoint_script")
    value = lookup(raw, "entrypoint", "", _ENTRYPOINT_RULE)
    # A command has several words ("python3 train.py"); one word must name a trial class.
    if isinstance(value, list) or (isinstance(value, str) and len(value.split()) > 1):
        return "", "", _own_launcher(_parse_command(value, "entrypoint", _ENTRYPOINT_RULE), value)
    if isinstance(value, str) and value.strip().count(":") == 1:
        module, trial_class = value.strip().split(":")
        if all(_is_identifier(part) for part in module.split(".")) and _is_identifier(trial_class):
            return module, trial_class, ()
    raise invalid_value("entrypoint", _ENTRYPOINT_RULE, value)


def _own_launcher(command: tuple[str, ...], value: Any, path: str = "entrypoint") -> tuple[str, ...]:
    """``python3 -m determined.launch.<engine> -- ...`` as det-estimator's launcher of that engine, with a note.

    The reference's launchers take options of its own cluster (``--autohorovod``,
    ``--trial``, Horovod overrides) that det-estimator's do not: a command giving any is
    refused now, rather than failing when the trial starts.
    """
    if len(command) < 3 or command[1] != "-m" or command[2] not in _REFERENCE_LAUNCHERS:
        return command
    ours = _REFERENCE_LAUNCHERS[command[2]]
    rest = list(command[3:])
    script = rest[1:] if rest[:1] == ["--"] else rest
    if not script or script[0].startswith("-"):
        rule = (
            f"`python3 -m {command[2]} -- <command>` (det-estimator runs the command as "
            f"`python3 -m {ours} -- <command>`, which takes none of {command[2]}'s options)"
        )
        raise invalid_value(path, rule, value)
    note_once(
        f"{PREFIX}`{path}` runs `{command[2]}`, the reference system's launcher: det-estimator runs "
        f"`python3 -m {ours} -- {shlex.join(script)}` instead, which starts the command on every slot as it does.",
        ReferenceFormMappedWarning,
    )
    return (command[0], "-m", ours, "--", *script)


def _describe_entrypoint(raw: Mapping[str, Any]) -> str:
    return describe(raw.get("entrypoint"))


def _parse_command(value: Any, path: str, rule: str) -> tuple[str, ...]:
    words: list[str] = []
    if isinstance(value, list) and value and all(isinstance(word, str) and word for word in value):
        words = value
    elif isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError:
            words = []
    if any("\0" in word for word in words):  # no command line can hold it
        raise invalid_value(path, f"{rule}, without NUL characters", value)
    if words:
        return tuple(words)
    raise invalid_value(path, rule, value)


def _parse_labels(raw: Mapping[str, Any]) -> tuple[str, ...]:
    labels = lookup(raw, "labels", "", "a list of strings", default=[])
    if not isinstance(labels, (list, tuple)):
        raise invalid_value("labels", "a list of strings", labels)
    for index, label in enumerate(labels):
        if not isinstance(label, str):
            raise invalid_value(join("labels", index), "a string", label)
    return tuple(labels)


def _parse_data(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    data = lookup(raw, "data", "", MAPPING_RULE, default={})
    if not isinstance(data, Mapping):
        raise invalid_value("data", MAPPING_RULE, data)
    return freeze_mapping(data, "data")


def _parse_optional_length(raw: Mapping[str, Any], key: str) -> Optional[Length]:
    value = raw.get(key)
    return None if value is None else parse_length(value, key)


def _parse_schedule(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Reads the keys that say when to train, validate and checkpoint."""
    return {
        "records_per_epoch": read_int(raw, "records_per_epoch", "", minimum=0, default=0),
        "scheduling_unit": read_int(raw, "scheduling_unit", "", minimum=1, default=100),
        "min_validation_period": _parse_optional_length(raw, "min_validation_period"),
        "min_checkpoint_period": _parse_optional_length(raw, "min_checkpoint_period"),
        "perform_initial_validation": read_bool(raw, "perform_initial_validation", "", default=False),
        "checkpoint_policy": read_choice(raw, "checkpoint_policy", "", CHECKPOINT_POLICIES, default="best"),
    }


def _check_batches_fit(length: Length, path: str, global_batch_size: int, records_per_epoch: int) -> None:
    """Refuses a length in epochs that comes to more batches than a 64-bit integer holds."""
    batches = length.to_batches(global_batch_size, records_per_epoch)
    if batches > INT64_MAX:
        raise ConfigError(
            f"{PREFIX}`{path}` comes to {batches} batches (of {global_batch_size} records, with "
            f"records_per_epoch {records_per_epoch}); expected at most 2**63 - 1. Received: {length.to_dict()}"
        )


def _check_consistency(config: ExperimentConfig, smallest_global_batch_size: Optional[int]) -> None:
    """Checks the rules that involve more than one key."""
    lengths = {
        "searcher.max_length": config.searcher.max_length,
        "min_validation_period": config.min_validation_period,
        "min_checkpoint_period": config.min_checkpoint_period,
    }
    for path, length in lengths.items():
        if length is not None:
            check_epochs_allowed(length, path, config.records_per_epoch)
            if smallest_global_batch_size is not None:
                _check_batches_fit(length, path, smallest_global_batch_size, config.records_per_epoch)
    if smallest_global_batch_size is not None and smallest_global_batch_size < config.resources.slots_per_trial:
        raise _fewer_records_than_slots(smallest_global_batch_size, config.resources.slots_per_trial)
    if config.searcher.name == "grid":
        _check_grid_size(config.hyperparameters)  # refused here, before anything is recorded


def _check_grid_size(hyperparameters: Mapping[str, Any]) -> None:
    """Refuses a grid without a ``count`` for every range, or of more than :data:`MAX_GRID_TRIALS` points."""
    counts = grid_counts(hyperparameters)  # every range needs a count
    trials = math.prod(count for _, count in counts)
    if trials <= MAX_GRID_TRIALS:
        return
    factors = " x ".join(f"{count:,} ({path})" for path, count in counts if count > 1)
    raise ConfigError(
        f"{PREFIX}the grid search would create {trials:,} trials, one per combination of the hyperparameters' "
        f"values: {factors}. A grid search may create at most {MAX_GRID_TRIALS:,} trials. Give fewer values (a "
        "smaller `count`, fewer categorical `vals`), or sample the space with `searcher.name: random` (or "
        "`adaptive_asha`) and `searcher.max_trials`."
    )


def _parse(raw: Mapping[Any, Any]) -> ExperimentConfig:
    # Keys are validated in a fixed order (the order of the fields), and the first error is raised.
    ignored: dict[str, str] = {}
    raw = cluster_only_keys(raw, ignored)
    check_keys(raw, "", _TOP_LEVEL_KEYS)
    entrypoint_module, entrypoint_class, entrypoint_command = _parse_entrypoint(raw)
    name = read_str(raw, "name", "", default="")
    description = read_str(raw, "description", "", default="")
    labels = _parse_labels(raw)
    data = _parse_data(raw)
    if entrypoint_command and raw.get("hyperparameters") is None:
        hyperparameters = parse_hyperparameters({}, "hyperparameters")
    else:
        hyperparameters = parse_hyperparameters(raw.get("hyperparameters"), "hyperparameters")
    # A trial class batches its data by the global batch size; a script may not batch at all.
    smallest_global_batch_size = None
    if not entrypoint_command or GLOBAL_BATCH_SIZE in (raw.get("hyperparameters") or {}):
        smallest_global_batch_size = check_global_batch_size(raw["hyperparameters"], "hyperparameters")
    searcher = parse_searcher(raw.get("searcher"), "searcher")
    if searcher.length_from_script and not entrypoint_command:
        raise ConfigError(
            f"{PREFIX}missing required key `searcher.max_length`: a trial class (entrypoint "
            f"{_describe_entrypoint(raw)}) trains to it, and nothing else decides how long it trains. Give a "
            "length such as {batches: 1000} (or max_time with time_metric). Only a script (a command entrypoint) "
            "may go without one: it trains to a length of its own."
        )
    config = ExperimentConfig(
        entrypoint_module=entrypoint_module,
        entrypoint_class=entrypoint_class,
        entrypoint_command=entrypoint_command,
        name=name,
        description=description,
        labels=labels,
        data=data,
        hyperparameters=hyperparameters,
        searcher=searcher,
        **_parse_schedule(raw),
        checkpoint_storage=parse_checkpoint_storage(raw.get("checkpoint_storage"), "checkpoint_storage"),
        resources=parse_resources(raw.get("resources"), "resources"),
        optimizations=parse_optimizations(raw.get("optimizations"), "optimizations"),
        reproducibility=parse_reproducibility(raw.get("reproducibility"), "reproducibility"),
        max_restarts=parse_max_restarts(raw),
        hang_timeout_seconds=parse_hang_timeout_seconds(raw),
        environment=parse_environment(raw.get("environment"), "environment", ignored),
    )
    _check_consistency(config, smallest_global_batch_size)
    # Only once the config is valid: a config refused gets its error, not a warning too.
    warn_ignored(ignored)
    return config


def load_experiment_config(source: ConfigSource) -> ExperimentConfig:
    """Loads and validates an experiment config.

    Everything is validated here, once; the returned object is immutable and
    the rest of the code trusts it (:meth:`ExperimentConfig.with_overrides`
    changes keys of a loaded config, validated alike). A config without
    ``reproducibility.experiment_seed`` gets a seed from the clock, so load it
    once (in the launcher) and hand ``to_dict()`` to the workers, which then
    all see the same seed.

    Example::

        config = load_experiment_config("const.yaml")
        hparams = config.sample_hyperparameters(config.reproducibility.experiment_seed)
        batches = config.searcher.max_length.to_batches(hparams["global_batch_size"], config.records_per_epoch)

    Args:
        source: Path to a YAML file (str or path-like), or an already-parsed dict.

    Returns:
        The validated config.

    Raises:
        ConfigError: For the first problem found; the message names the key's
            dotted path, what it must be and what it was.
        TypeError: If ``source`` is neither a path nor a mapping.
    """
    return _parse(read_source(source))
