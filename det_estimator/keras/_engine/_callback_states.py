"""Callback states in a checkpoint: JSON, with NumPy arrays beside it in an ``.npz`` read without pickle.

``callbacks.json`` holds, per ``det.keras.callbacks.Callback`` in list order, its class
and its state with every array replaced by a reference ``{"__ndarray__": "<key>"}``;
``callbacks.npz`` holds the arrays under those keys. Loading never unpickles, so a
checkpoint cannot run code when a trial resumes from it.
"""

import json
import logging
import numbers
from pathlib import Path
from typing import Any, Optional

import numpy as np

from det_estimator.errors import PermanentTrialError

logger = logging.getLogger("det_estimator.keras")

STATES_FILE = "callbacks.json"
ARRAYS_FILE = "callbacks.npz"
_ARRAY_KEY = "__ndarray__"
_FORMAT = 1

ALLOWED = (
    "JSON values (dicts with string keys, lists, tuples, strings, numbers, booleans, None), NumPy arrays and "
    "scalars, and tensors"
)


class CallbackStateError(PermanentTrialError, TypeError):
    """A callback's ``get_state()`` returned something a checkpoint cannot hold.

    The message names the callback and the path of the value; det-estimator's frames,
    which are all a traceback would show, would only hide it.
    """


def class_name(callback: Any) -> str:
    """How a callback's class is recorded: ``module.QualifiedName``."""
    kind = type(callback)
    return f"{kind.__module__}.{kind.__qualname__}"


def write_states(directory: Path, callbacks: list[Any]) -> None:
    """Writes the states of ``callbacks`` (``det.keras.callbacks.Callback`` instances) into ``directory``.

    Raises:
        CallbackStateError: a state holds something other than what :data:`ALLOWED`
            lists; the message names the callback and the path of the value.
    """
    arrays: dict[str, np.ndarray] = {}
    records = []
    for index, callback in enumerate(callbacks):
        state = callback.get_state()
        where = f"{class_name(callback)} (callback {index}).get_state()"
        records.append({"class": class_name(callback), "state": _encode(state, where, arrays)})
    text = json.dumps({"format": _FORMAT, "callbacks": records}, allow_nan=True)
    (directory / STATES_FILE).write_text(text, encoding="utf-8")
    if arrays:
        # NumPy 2's stubs read **arrays as perhaps its allow_pickle flag; the keys are a0, a1, ...
        save: Any = np.savez
        save(directory / ARRAYS_FILE, **arrays)


def read_states(directory: Path) -> Optional[list[dict[str, Any]]]:
    """The saved ``[{"class", "state"}, ...]`` of a checkpoint, or None if it holds no callback states."""
    path = directory / STATES_FILE
    if not path.exists():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    arrays: dict[str, np.ndarray] = {}
    if (directory / ARRAYS_FILE).exists():
        with np.load(directory / ARRAYS_FILE, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
    return [{"class": record["class"], "state": _decode(record["state"], arrays)} for record in saved["callbacks"]]


def load_states(saved: list[dict[str, Any]], callbacks: list[Any]) -> None:
    """Hands each callback the state saved for the callback of the same class at the same position.

    A callback without a saved state (the list of callbacks changed since the
    checkpoint) starts afresh, with a warning.
    """
    for index, callback in enumerate(callbacks):
        record = saved[index] if index < len(saved) else None
        if record is None or record["class"] != class_name(callback):
            logger.warning(
                "callback %d (%s) has no saved state in the checkpoint (it saved: %s); it starts afresh. Keep the "
                "list returned by keras_callbacks() in the same order to resume callbacks.",
                index,
                class_name(callback),
                ", ".join(record["class"] for record in saved) or "no callback",
            )
            continue
        if record["state"] is not None:
            callback.load_state(record["state"])


def _encode(value: Any, where: str, arrays: dict[str, np.ndarray]) -> Any:
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, np.generic):
        return int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "numpy") and callable(value.numpy):  # a tensor or a variable
        value = np.asarray(value.numpy())
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            raise CallbackStateError(
                f"A callback state may hold numeric arrays only. Received: an object array at {where}"
            )
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {_ARRAY_KEY: key}
    if isinstance(value, (list, tuple)):
        return [_encode(item, f"{where}[{index}]", arrays) for index, item in enumerate(value)]
    if isinstance(value, dict):
        encoded = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CallbackStateError(f"A callback state's dict keys must be str. Received: {key!r} in {where}")
            encoded[key] = _encode(item, f"{where}[{key!r}]", arrays)
        if list(encoded) == [_ARRAY_KEY]:
            raise CallbackStateError(f"A callback state may not be a dict whose only key is {_ARRAY_KEY!r}: {where}")
        return encoded
    raise CallbackStateError(
        f"A callback state may hold only {ALLOWED}. Received: {type(value).__module__}.{type(value).__qualname__} "
        f"at {where}"
    )


def _decode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(item, arrays) for item in value]
    if isinstance(value, dict):
        if list(value) == [_ARRAY_KEY]:
            return arrays[value[_ARRAY_KEY]]
        return {key: _decode(item, arrays) for key, item in value.items()}
    return value
