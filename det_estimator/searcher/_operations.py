"""What a search method asks of the orchestrator, and why a trial ended early.

Operations are frozen dataclasses with a JSON form (``to_dict`` and
:func:`operation_from_dict`), so that the orchestrator can store them.
"""

import copy
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Union


class ExitedReason(enum.Enum):
    """Why a trial ended before its operations were done.

    Attributes:
        ERRORED: The trial failed (an exception, a crashed process, restarts used up).
        USER_CANCELED: A user stopped the trial.
        INVALID_HP: The trial raised :class:`det_estimator.errors.InvalidHP`: its
            hyperparameters cannot work. Random and TPE searches replace it.
    """

    ERRORED = "errored"
    USER_CANCELED = "user_canceled"
    INVALID_HP = "invalid_hp"


@dataclass(frozen=True)
class Create:
    """Start a new trial.

    Attributes:
        request_id: The trial's number in the search: 0, 1, 2, ... in creation order.
        hparams: The trial's hyperparameter values; nested groups are nested dicts.
        trial_seed: The trial's seed, for its random number generators.
    """

    request_id: int
    hparams: dict[str, Any] = field(hash=False)
    trial_seed: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the operation as a JSON-serializable dict; :func:`operation_from_dict` reverses it."""
        return {
            "type": "create",
            "request_id": self.request_id,
            "hparams": copy.deepcopy(self.hparams),
            "trial_seed": self.trial_seed,
        }


@dataclass(frozen=True)
class ValidateAfter:
    """Train a trial until ``length`` in total, then validate it and report the searcher's metric.

    Attributes:
        request_id: The trial.
        length: Cumulative training length, in the unit of ``searcher.max_length``
            (batches, records or epochs).
    """

    request_id: int
    length: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the operation as a JSON-serializable dict; :func:`operation_from_dict` reverses it."""
        return {"type": "validate_after", "request_id": self.request_id, "length": self.length}


@dataclass(frozen=True)
class Close:
    """The trial is finished: it gets no more operations.

    Attributes:
        request_id: The trial.
    """

    request_id: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the operation as a JSON-serializable dict; :func:`operation_from_dict` reverses it."""
        return {"type": "close", "request_id": self.request_id}


@dataclass(frozen=True)
class Shutdown:
    """The search is over.

    Attributes:
        failure: True when every trial ended early (none was closed).
        reason: why the search ended before its trials were all tried, when it did
            ("" when it ran them all).
    """

    failure: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Returns the operation as a JSON-serializable dict; :func:`operation_from_dict` reverses it."""
        return {"type": "shutdown", "failure": self.failure, "reason": self.reason}


Operation = Union[Create, ValidateAfter, Close, Shutdown]

# Each operation's "type" in its dict form, and how to build it from the other keys.
_FROM_DICT: dict[str, tuple[tuple[str, ...], Callable[..., Operation]]] = {
    "create": (("request_id", "hparams", "trial_seed"), Create),
    "validate_after": (("request_id", "length"), ValidateAfter),
    "close": (("request_id",), Close),
    "shutdown": (("failure", "reason"), Shutdown),
}


def operation_from_dict(d: dict[str, Any]) -> Operation:
    """Rebuilds an operation from its ``to_dict()`` form.

    Args:
        d: A dict with a ``type`` key ("create", "validate_after", "close" or
            "shutdown") and exactly that operation's fields.

    Returns:
        The operation.

    Raises:
        ValueError: If the type is unknown or the keys are not the operation's fields.
    """
    kind = d.get("type") if isinstance(d, dict) else None
    if kind not in _FROM_DICT:
        raise ValueError(f"An operation dict must have a type among {sorted(_FROM_DICT)}. Received: {d!r}")
    keys, build = _FROM_DICT[kind]
    fields = {key: value for key, value in d.items() if key != "type"}
    if set(fields) != set(keys):
        raise ValueError(
            f"A {kind!r} operation dict must have exactly the keys type, {', '.join(keys)}. Received: {d!r}"
        )
    if kind == "create":
        fields["hparams"] = copy.deepcopy(fields["hparams"])
    return build(**fields)
