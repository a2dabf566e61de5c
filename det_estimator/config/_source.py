"""Reading an experiment config from a YAML file, or taking an already-parsed mapping."""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import yaml

from det_estimator.config._errors import PREFIX, ConfigError, describe

ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key given twice in one mapping.

    Plain PyYAML keeps the last of two equal keys, so a second ``searcher:``
    block would silently replace the first.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            # Keys merged in with `<<: *anchor` may legitimately be overridden.
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{PREFIX}file {path} does not exist.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{PREFIX}cannot read {path}: {error}") from error
    try:
        # _UniqueKeyLoader is a SafeLoader: no arbitrary Python objects.
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as error:
        raise ConfigError(f"{PREFIX}{path} is not valid YAML: {error}") from error


def read_source(source: ConfigSource) -> Mapping[Any, Any]:
    """Returns the raw config mapping of a YAML file or an already-parsed mapping.

    Args:
        source: Path to a YAML file, or a mapping.

    Returns:
        The raw, unvalidated mapping.

    Raises:
        ConfigError: If the file does not exist, cannot be read, is not valid
            YAML, or its top level is not a mapping.
        TypeError: If ``source`` is neither a path nor a mapping.
    """
    if isinstance(source, Mapping):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"An experiment config must be a path to a YAML file or a dict. Received: {describe(source)}")
    path = Path(source)
    raw = _read_yaml(path)
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{PREFIX}the top level of {path} must be a mapping of keys to values. Received: {describe(raw)}"
        )
    return raw
