"""Reading an experiment config from a YAML file, or taking an already-parsed mapping."""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import yaml

from det_estimator.config._errors import PREFIX, ConfigError, describe

ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]

# Configs are a few kilobytes; these bounds refuse files and alias tricks that would
# exhaust memory or time, and keep the store (which holds every config) small.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_NODES = 100_000
MAX_CONFIG_DEPTH = 100


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
            # A list or a mapping as a key is unhashable: PyYAML refuses it just below, as YAML.
            if not isinstance(key, (str, int, float, bool)):
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{PREFIX}{path} is {size:,} bytes; a config is at most {MAX_CONFIG_BYTES:,} bytes. Keep large data "
                "in files that the trial reads, and their paths in the config's `data` section."
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{PREFIX}file {path} does not exist.") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{PREFIX}{path} is not UTF-8 text: {error.reason} at byte {error.start}.") from None
    except OSError as error:
        raise ConfigError(f"{PREFIX}cannot read {path}: {error.strerror or error}") from None
    # _UniqueKeyLoader is a SafeLoader: no arbitrary Python objects.
    loader = _UniqueKeyLoader(text)
    # Errors then point at the file (`in "const.yaml", line 3`), not at PyYAML's "<unicode string>".
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise ConfigError(f"{PREFIX}{path} is not valid YAML: {error}") from None
    except RecursionError:
        # PyYAML parses nested lists and mappings recursively: a few hundred levels exhaust the stack.
        raise _too_deep(path) from None
    finally:
        loader.dispose()


def _too_deep(path: Path) -> ConfigError:
    return ConfigError(
        f"{PREFIX}{path} nests lists and mappings more than {MAX_CONFIG_DEPTH} levels deep. Expected a config of "
        "ordinary shape; keep deeply nested data in files that the trial reads."
    )


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuses YAML whose aliases refer to themselves, or expand to more than ``MAX_CONFIG_NODES`` values.

    An alias is a reference to another node, so a few hundred bytes of nested aliases
    (the "billion laughs") stand for billions of values once anything walks them, and
    an alias inside its own anchor makes a structure with no end.
    """
    expanded: dict[int, int] = {}
    in_progress: set[int] = set()

    def count(node: yaml.Node, depth: int = 1) -> int:
        if depth > MAX_CONFIG_DEPTH:
            raise _too_deep(path)
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in in_progress:
            raise ConfigError(
                f"{PREFIX}{path} has an alias inside its own anchor ({node.start_mark.line + 1}:"
                f"{node.start_mark.column + 1}), which makes a value with no end. Expected aliases that refer to "
                "values defined before and outside them."
            )
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(count(item, depth + 1) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(count(name, depth + 1) + count(value, depth + 1) for name, value in node.value)
        in_progress.discard(key)
        if total > MAX_CONFIG_NODES:
            raise ConfigError(
                f"{PREFIX}{path} expands to more than {MAX_CONFIG_NODES:,} values through its aliases (`*name`). "
                "Expected a config of ordinary size; write the values out, or keep large data in files."
            )
        expanded[key] = total
        return total

    count(root)


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
