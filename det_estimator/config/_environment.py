"""The ``environment`` section, ``max_restarts``, ``hang_timeout_seconds``, and the keys that matter only on a cluster.

A config ported from the reference system keeps its cluster settings (a container image,
a pod spec, bind mounts, a workspace...). det-estimator runs the trial's processes itself,
on this machine or the ``--hosts`` given, so those keys have nothing to act on: they are
accepted, left out of the validated config, and named in one warning that says why.
"""

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det_estimator.config._errors import PREFIX, ConfigError, invalid_value
from det_estimator.config._fields import as_mapping, check_keys, join, read_int

# The device types the reference keys per-device settings by.
DEVICE_TYPES = ("cpu", "cuda", "rocm")
DEFAULT_MAX_RESTARTS = 5
# Half an hour without a batch, a validation step or a checkpoint on any process: far
# longer than any of those takes, short of a process that waits for ever.
DEFAULT_HANG_TIMEOUT_SECONDS = 1800

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VARIABLES_RULE = (
    'a list of "NAME=value" strings, a mapping of names to values, or a mapping of device types '
    f"({', '.join(DEVICE_TYPES)}) to either"
)

# Why each cluster-only key is ignored, by the key's dotted path.
_NO_CONTAINER = "no container: the processes run in this Python environment"
CLUSTER_ONLY_TOP_LEVEL = {
    "bind_mounts": "no container: paths are used as they are on each host",
    "data_layer": "no cluster data layer: the trial reads its data itself",
    "debug": "no cluster debug logging: `--verbose` shows the processes' output",
    "internal": "cluster internals",
    "profiling": "no cluster profiler",
    "project": "no cluster projects: experiments are recorded in the store",
    "security": "no cluster users: the processes run as the user who starts them",
    "tensorboard_storage": "TensorBoard event files are written beside the store",
    "workspace": "no cluster workspaces: experiments are recorded in the store",
}
CLUSTER_ONLY_ENVIRONMENT = {
    "add_capabilities": _NO_CONTAINER,
    "drop_capabilities": _NO_CONTAINER,
    "force_pull_image": _NO_CONTAINER,
    "image": _NO_CONTAINER,
    "pod_spec": "no Kubernetes pod: the processes run on this machine or the --hosts given",
    "ports": "no container ports to expose",
    "proxy_ports": "no cluster proxy",
    "registry_auth": _NO_CONTAINER,
}
CLUSTER_ONLY_RESOURCES = {
    "agent_label": "no cluster agents: the processes run on this machine or the --hosts given",
    "devices": _NO_CONTAINER,
    "is_single_node": "the --hosts given decide where the processes run",
    "max_slots": "the slots are the experiment's (`--slots` or `--hosts`)",
    "priority": "no cluster scheduler",
    "resource_pool": "no cluster resource pools: the processes run on this machine or the --hosts given",
    "shm_size": _NO_CONTAINER,
    "weight": "no cluster scheduler",
}


# The warnings given already by this process.
_WARNED: set[str] = set()


class ConfigNoteWarning(UserWarning):
    """What a config's loading tells the user about it (shown once per process, as the command's own warning)."""


class ClusterKeysIgnoredWarning(ConfigNoteWarning):
    """A config has keys that matter only on a cluster; they are ignored."""


class ReferenceFormMappedWarning(ConfigNoteWarning):
    """A config uses a form of the reference system's that det-estimator maps to its own (a launcher module)."""


def note_once(message: str, category: type[ConfigNoteWarning]) -> None:
    """Warns ``message`` once per process: a command loads one config several times (to fill in its seed, its slots)."""
    if message in _WARNED:
        return
    _WARNED.add(message)
    warnings.warn(message, category, stacklevel=5)


@dataclass(frozen=True)
class EnvironmentConfig:
    """The validated ``environment`` section: what of it acts outside a cluster.

    Attributes:
        environment_variables: per device type (``cpu``, ``cuda``, ``rocm``), the
            ``(name, value)`` pairs set in every worker process, on every host.
    """

    environment_variables: Mapping[str, tuple[tuple[str, str], ...]]

    def variables_for(self, device_type: str) -> dict[str, str]:
        """The variables the processes get when their slots are of ``device_type``."""
        return dict(self.environment_variables.get(device_type, ()))

    def to_dict(self) -> dict[str, Any]:
        """The section as JSON-ready data; :func:`parse_environment` reads it back the same."""
        return {
            "environment_variables": {
                device: [f"{name}={value}" for name, value in pairs]
                for device, pairs in self.environment_variables.items()
            }
        }


def load_environment(raw: Any, config_kind: str = "job") -> EnvironmentConfig:
    """The ``environment`` section of a config other than an experiment's; warns of its cluster-only keys.

    Args:
        raw: the section as parsed.
        config_kind: what config it is part of, as messages name it (``job config: ...``).

    Raises:
        ConfigError: an unknown key, or environment variables of the wrong form.
    """
    prefix = f"{config_kind} config: "
    ignored: dict[str, str] = {}
    try:
        environment = parse_environment(raw, "environment", ignored)
    except ConfigError as error:
        raise ConfigError(prefix + str(error).removeprefix(PREFIX)) from None
    warn_ignored(ignored, prefix)
    return environment


def parse_max_restarts(raw: Mapping[str, Any]) -> int:
    """``max_restarts``: how many times a failed trial is restarted from its latest checkpoint (default 5)."""
    return read_int(raw, "max_restarts", "", minimum=0, default=DEFAULT_MAX_RESTARTS)


def parse_hang_timeout_seconds(raw: Mapping[str, Any]) -> int:
    """``hang_timeout_seconds``: how long a trial may go without progress on any process before it hangs (0: never)."""
    return read_int(raw, "hang_timeout_seconds", "", minimum=0, default=DEFAULT_HANG_TIMEOUT_SECONDS)


def parse_environment(value: Any, path: str, ignored: dict[str, str]) -> EnvironmentConfig:
    """Validates the ``environment`` section; its cluster-only keys go into ``ignored`` (path to reason).

    Raises:
        ConfigError: an unknown key, or environment variables of the wrong form.
    """
    section = as_mapping(value, path)
    check_keys(section, path, ("environment_variables", *CLUSTER_ONLY_ENVIRONMENT))
    for key in section:
        if key in CLUSTER_ONLY_ENVIRONMENT and section[key] is not None:
            ignored[join(path, key)] = CLUSTER_ONLY_ENVIRONMENT[key]
    variables_path = join(path, "environment_variables")
    raw = section.get("environment_variables")
    if raw is None:
        raw = []
    if isinstance(raw, Mapping) and raw and all(key in DEVICE_TYPES for key in raw):
        per_device = {
            device: _parse_variables(raw.get(device), join(variables_path, device)) for device in DEVICE_TYPES
        }
    else:
        shared = _parse_variables(raw, variables_path)
        per_device = {device: shared for device in DEVICE_TYPES}
    return EnvironmentConfig(per_device)


def _parse_variables(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    pairs: list[tuple[str, Any]] = []
    if isinstance(value, Mapping):
        pairs = [(str(name), item) for name, item in value.items()]
    elif isinstance(value, (list, tuple)):
        for index, entry in enumerate(value):
            if not isinstance(entry, str) or "=" not in entry:
                raise invalid_value(join(path, index), 'a "NAME=value" string', entry)
            name, _, item = entry.partition("=")
            pairs.append((name, item))
    else:
        raise invalid_value(path, _VARIABLES_RULE, value)
    checked = []
    for name, item in pairs:
        if not _NAME.match(name):
            raise invalid_value(path, f"{_VARIABLES_RULE}, each name a valid variable name", name)
        if isinstance(item, bool):
            item = "true" if item else "false"
        if item is None or isinstance(item, (Mapping, list, tuple)):
            raise invalid_value(join(path, name), "a string or a number", item)
        if "\0" in str(item):  # no process environment can hold it
            raise invalid_value(join(path, name), "a string without NUL characters", item)
        checked.append((name, str(item)))
    return tuple(checked)


def cluster_only_keys(raw: Mapping[str, Any], ignored: dict[str, str]) -> dict[str, Any]:
    """Notes the top-level and ``resources`` keys that matter only on a cluster; returns the config without them."""
    kept = {}
    for key, value in raw.items():
        if key in CLUSTER_ONLY_TOP_LEVEL:
            if value is not None:
                ignored[key] = CLUSTER_ONLY_TOP_LEVEL[key]
            continue
        kept[key] = value
    resources = kept.get("resources")
    if isinstance(resources, Mapping) and any(key in CLUSTER_ONLY_RESOURCES for key in resources):
        for key, value in resources.items():
            if key in CLUSTER_ONLY_RESOURCES and value is not None:
                ignored[join("resources", key)] = CLUSTER_ONLY_RESOURCES[key]
        kept["resources"] = {key: value for key, value in resources.items() if key not in CLUSTER_ONLY_RESOURCES}
    return kept


def warn_ignored(ignored: dict[str, str], prefix: str = PREFIX) -> None:
    """One warning naming every cluster-only key of the config, and why each is ignored."""
    if not ignored:
        return
    reasons = "; ".join(f"`{path}` ({reason})" for path, reason in ignored.items())
    note_once(
        f"{prefix}ignored {len(ignored)} key(s) that matter only on a cluster: {reasons}.", ClusterKeysIgnoredWarning
    )
