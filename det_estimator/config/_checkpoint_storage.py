"""The ``checkpoint_storage`` section. Only ``shared_fs`` storage is implemented."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from det_estimator.config._errors import invalid_value
from det_estimator.config._fields import MAPPING_RULE, check_keys, join, lookup, read_int, read_str

DEFAULT_HOST_PATH = "~/.det-estimator/checkpoints"
SHARED_FS = "shared_fs"

_RETENTION_KEYS = ("save_trial_latest", "save_trial_best", "save_experiment_best")
_KEYS = ("type", "host_path", "storage_path", *_RETENTION_KEYS)
# Keys of the reference system's shared_fs storage that only matter inside its containers.
_NOT_SUPPORTED = ("checkpoint_path", "container_path", "propagation", "tensorboard_path")


@dataclass(frozen=True)
class CheckpointStorageConfig:
    """The validated ``checkpoint_storage`` section.

    Attributes:
        host_path: Root directory of the storage, with ``~`` expanded.
        storage_path: Sub-directory of ``host_path`` for this experiment's
            checkpoints, relative; "" for ``host_path`` itself.
        save_trial_latest: Number of the trial's most recent checkpoints to keep
            (at least 1 until the experiment has completed, so that it can resume).
        save_trial_best: Number of the trial's best checkpoints to keep.
        save_experiment_best: Number of the experiment's best checkpoints to keep.
    """

    TYPE: ClassVar[str] = SHARED_FS

    host_path: str
    storage_path: str
    save_trial_latest: int
    save_trial_best: int
    save_experiment_best: int

    @property
    def checkpoint_directory(self) -> str:
        """The directory checkpoints are written to: ``host_path`` joined with ``storage_path``."""
        return os.path.normpath(os.path.join(self.host_path, self.storage_path))

    def to_dict(self) -> dict[str, Any]:
        """Returns the section with defaults filled in, JSON-serializable."""
        return {
            "type": self.TYPE,
            "host_path": self.host_path,
            "storage_path": self.storage_path,
            "save_trial_latest": self.save_trial_latest,
            "save_trial_best": self.save_trial_best,
            "save_experiment_best": self.save_experiment_best,
        }


def _read_type(section: Mapping[str, Any], path: str) -> None:
    rule = f'"{SHARED_FS}"'
    kind = lookup(section, "type", path, rule)
    if isinstance(kind, str) and kind != SHARED_FS:
        rule = f'"{SHARED_FS}" (checkpoint storage type "{kind}" is not supported yet)'
    if kind != SHARED_FS:
        raise invalid_value(join(path, "type"), rule, kind)


def _read_storage_path(section: Mapping[str, Any], path: str) -> str:
    storage_path = read_str(section, "storage_path", path, default="")
    # Checkpoints must stay inside host_path, where retention and clean-up look for them.
    outside = os.path.isabs(storage_path) or os.path.normpath(storage_path).split(os.sep)[0] == os.pardir
    if outside or "\0" in storage_path:
        raise invalid_value(join(path, "storage_path"), "a relative path inside `host_path`", storage_path)
    return storage_path


def parse_checkpoint_storage(value: Any, path: str) -> CheckpointStorageConfig:
    """Validates the ``checkpoint_storage`` section.

    When the section is absent, or holds only retention keys (``save_trial_latest``,
    ``save_trial_best``, ``save_experiment_best``: the reference's cluster filled in the
    storage itself), checkpoints go to ``~/.det-estimator/checkpoints``.

    Args:
        value: The raw section, or None.
        path: Its dotted path (``checkpoint_storage``).

    Returns:
        The checkpoint storage config.

    Raises:
        ConfigError: If the section is invalid or names a storage type other than ``shared_fs``.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise invalid_value(path, MAPPING_RULE, value)
    if all(key in _RETENTION_KEYS for key in value):
        value = {"type": SHARED_FS, "host_path": DEFAULT_HOST_PATH, **value}
    # The type decides which keys are valid, so it is checked first.
    _read_type(value, path)
    check_keys(value, path, _KEYS, _NOT_SUPPORTED)
    host_path = read_str(value, "host_path", path, non_empty=True)
    if "\0" in host_path:  # no file system path can hold it
        raise invalid_value(join(path, "host_path"), "a path without NUL characters", host_path)
    return CheckpointStorageConfig(
        host_path=os.path.expanduser(host_path),
        storage_path=_read_storage_path(value, path),
        save_trial_latest=read_int(value, "save_trial_latest", path, minimum=0, default=1),
        save_trial_best=read_int(value, "save_trial_best", path, minimum=0, default=1),
        save_experiment_best=read_int(value, "save_experiment_best", path, minimum=0, default=0),
    )
