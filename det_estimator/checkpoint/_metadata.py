"""A checkpoint's ``metadata.json``: what callers may put in it, and reading it back.

Metadata is JSON, never pickle: a checkpoint must be readable without running any
code it carries, and by tools that are not Python. The caller's entries sit next to
the entries this package writes itself (``uuid``, ``format_version``, ``created``
and the ``files`` manifest), which callers may therefore not set.
"""

import json
import math
import re
from pathlib import Path, PurePosixPath
from typing import Any

from det_estimator.errors import DetEstimatorError

METADATA_FILE = "metadata.json"
FORMAT_VERSION = 1
STEPS_COMPLETED = "steps_completed"
VALIDATION_METRICS = "validation_metrics"
RESERVED_KEYS = ("uuid", "format_version", "created", "files")

_SHA256 = re.compile(r"[0-9a-f]{64}")
_JSON_TYPES = "None, bool, int, float, str, or a list or dict of those (dict keys must be str)"


class InvalidCheckpointError(DetEstimatorError, ValueError):
    """A directory whose ``metadata.json`` is missing, unreadable or malformed.

    Attributes:
        problem: What is wrong, without the directory, e.g. ``metadata.json is missing``.
    """

    def __init__(self, directory: Path, problem: str):
        super().__init__(f"{directory} is not a readable checkpoint: {problem}")
        self.problem = problem


def check_json_value(value: Any, where: str) -> None:
    """Checks that a value is made of JSON types only, so that it survives a round trip.

    Tuples are accepted and come back as lists. Non-finite floats are accepted
    (Python's ``json`` writes them as ``NaN`` and ``Infinity``) because a diverged
    loss must not stop a checkpoint from being written.

    Args:
        value: The value to check.
        where: How messages name it, e.g. ``metadata['hparams']``.

    Raises:
        TypeError: Naming the first offending key and its value.
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} must have str keys to be stored as JSON. Received key: {key!r} ({type(key).__name__})"
                )
            check_json_value(item, f"{where}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_json_value(item, f"{where}[{index}]")
        return
    raise TypeError(
        f"{where} must be JSON: {_JSON_TYPES}. Received: {value!r} ({type(value).__name__}). "
        "Convert it first, e.g. with int(), float() or .tolist()."
    )


def check_caller_metadata(metadata: Any) -> None:
    """Checks the metadata a caller hands to a checkpoint write.

    Args:
        metadata: The caller's metadata.

    Raises:
        TypeError: If it is not a dict or holds a value that is not JSON.
        ValueError: If it lacks an int ``steps_completed`` or sets a key this package writes.
    """
    if not isinstance(metadata, dict):
        raise TypeError(f"Checkpoint metadata must be a dict. Received: {type(metadata).__name__}")
    steps = metadata.get(STEPS_COMPLETED)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(
            f"Checkpoint metadata must have an int `{STEPS_COMPLETED}` >= 0 (the number of batches trained). "
            f"Received: {STEPS_COMPLETED}={steps!r}"
        )
    reserved = sorted(key for key in RESERVED_KEYS if key in metadata)
    if reserved:
        raise ValueError(f"Checkpoint metadata may not set {reserved}: these entries are written when it is sealed.")
    check_json_value(metadata, "metadata")


def check_validation_metrics(metrics: Any) -> None:
    """Checks validation metrics before they are recorded in a checkpoint's metadata.

    Args:
        metrics: Metric name to value.

    Raises:
        TypeError: If it is not a dict of JSON values with str keys.
    """
    if not isinstance(metrics, dict):
        raise TypeError(f"Validation metrics must be a dict of metric name to value. Received: {metrics!r}")
    check_json_value(metrics, VALIDATION_METRICS)


def encode(metadata: dict[str, Any]) -> bytes:
    """Serializes metadata for ``metadata.json``, indented so that people can read it.

    Args:
        metadata: The complete metadata.

    Returns:
        UTF-8 JSON.
    """
    return (json.dumps(metadata, indent=2) + "\n").encode("utf-8")


def load(directory: Path) -> dict[str, Any]:
    """Reads and checks the ``metadata.json`` of a checkpoint directory.

    Args:
        directory: The checkpoint directory.

    Returns:
        The parsed metadata.

    Raises:
        InvalidCheckpointError: If the file is missing, not JSON, or lacks a required entry.
    """
    try:
        data = (directory / METADATA_FILE).read_bytes()
    except FileNotFoundError:
        raise InvalidCheckpointError(directory, f"{METADATA_FILE} is missing") from None
    except OSError as error:
        raise InvalidCheckpointError(directory, f"{METADATA_FILE} cannot be read ({error})") from None
    return parse(directory, data)


def parse(directory: Path, data: bytes) -> dict[str, Any]:
    """Parses and checks the bytes of a ``metadata.json`` read from ``directory``.

    Args:
        directory: The checkpoint directory, for messages.
        data: The file's contents.

    Returns:
        The parsed metadata.

    Raises:
        InvalidCheckpointError: If the bytes are not UTF-8 JSON, or lack a required entry.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidCheckpointError(directory, f"{METADATA_FILE} cannot be read ({error})") from None
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidCheckpointError(directory, f"{METADATA_FILE} is not valid JSON ({error})") from None
    problem = _find_problem(metadata)
    if problem:
        raise InvalidCheckpointError(directory, f"{METADATA_FILE}: {problem}")
    return metadata


def _find_problem(metadata: Any) -> str:
    """Returns what is wrong with parsed metadata, or "" when it has every required entry."""
    if not isinstance(metadata, dict):
        return f"the top level must be an object, found {type(metadata).__name__}"
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        return f"format_version must be {FORMAT_VERSION}, found {version!r}"
    for key in ("uuid", "created"):
        if not isinstance(metadata.get(key), str) or not metadata[key]:
            return f"`{key}` must be a non-empty string, found {metadata.get(key)!r}"
    steps = metadata.get(STEPS_COMPLETED)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        return f"`{STEPS_COMPLETED}` must be an int >= 0, found {steps!r}"
    if not isinstance(metadata.get(VALIDATION_METRICS, {}), dict):
        return f"`{VALIDATION_METRICS}` must be an object, found {metadata[VALIDATION_METRICS]!r}"
    files = metadata.get("files")
    if not isinstance(files, dict):
        return f"`files` must be an object, found {files!r}"
    for name, entry in files.items():
        problem = _find_manifest_problem(name, entry)
        if problem:
            return f"files[{name!r}]: {problem}"
    return ""


def _find_manifest_problem(name: str, entry: Any) -> str:
    """Returns what is wrong with one entry of the ``files`` manifest, or ""."""
    path = PurePosixPath(name)
    # A manifest naming files outside its checkpoint would make verification read them.
    if not name or path.is_absolute() or ".." in path.parts or name == METADATA_FILE:
        return "not a file path inside the checkpoint"
    if not isinstance(entry, dict):
        return f"must be an object with sha256 and size, found {entry!r}"
    if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
        return f"sha256 must be 64 lowercase hex digits, found {entry.get('sha256')!r}"
    size = entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return f"size must be an int >= 0, found {size!r}"
    return ""


def metric_value(metadata: Any, metric: str) -> float:
    """A checkpoint's validation metric as a number that can be ranked.

    Args:
        metadata: The checkpoint's metadata.
        metric: The metric's name.

    Returns:
        The value, or NaN when the checkpoint has no usable value for it (not
        validated, metric absent, not a number, or NaN).
    """
    value = metadata.get(VALIDATION_METRICS, {}).get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)
