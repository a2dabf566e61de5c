"""The interface every search method implements, and what the search methods share.

A search method is a deterministic state machine: the orchestrator calls
:meth:`SearchMethod.initial_operations` once, then reports each event (a
validation, a closed trial, an early exit) and carries out the operations it
gets back, in order. It saves :meth:`SearchMethod.state_dict` after every event;
a method rebuilt from the same config and given that state with
:meth:`SearchMethod.load_state_dict` continues exactly as the original would.
"""

import abc
import hashlib
import json
import math
import numbers
from typing import Any, Union

from det_estimator.config import ExperimentConfig
from det_estimator.errors import DetEstimatorError
from det_estimator.searcher._operations import ExitedReason, Operation

# The version of the state_dict layout; a state of another version is refused.
STATE_VERSION = 1


class SearcherError(DetEstimatorError, RuntimeError):
    """An event a search method cannot accept in its state, or a state it cannot load.

    For example a validation for a trial that has no ValidateAfter outstanding,
    a length other than the one asked for, or a state saved for another config.
    """


class SearchMethod(abc.ABC):
    """A hyperparameter search: decides which trials to create, how long to train them and when to stop them.

    Subclasses take the experiment config as their only constructor argument.
    Every method below except :meth:`progress` and :meth:`state_dict` raises
    :class:`SearcherError` for an event the search cannot be in (an unknown
    trial, a trial not in the state the event needs, any event after Shutdown).
    """

    #: The ``searcher.name`` the class implements.
    name = ""

    def __init__(self, config: ExperimentConfig) -> None:
        if config.searcher.name != self.name:
            raise ValueError(
                f"{type(self).__name__} runs the {self.name!r} searcher. Received: {config.searcher.name!r}"
            )
        self._config = config

    @abc.abstractmethod
    def initial_operations(self) -> list[Operation]:
        """Returns the operations that start the search; call once, on a new search only.

        Returns:
            Creates, each followed by its trial's first ValidateAfter.
        """

    @abc.abstractmethod
    def on_validation_completed(self, request_id: int, metric: float, length: int) -> list[Operation]:
        """Reports that a trial finished its outstanding ValidateAfter.

        Args:
            request_id: The trial.
            metric: The raw value of ``searcher.metric``; the method applies
                ``smaller_is_better`` itself, and NaN counts as the worst value.
            length: The length the trial trained to: that of its ValidateAfter.

        Returns:
            The next operations.
        """

    @abc.abstractmethod
    def on_trial_closed(self, request_id: int) -> list[Operation]:
        """Reports that a trial sent a Close has finished.

        Args:
            request_id: The trial.

        Returns:
            The next operations.
        """

    @abc.abstractmethod
    def on_trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Operation]:
        """Reports that a trial ended before finishing its operations; it gets no more.

        A trial that exits after it was sent Close counts as closed.

        Args:
            request_id: The trial.
            reason: Why it ended.

        Returns:
            The next operations.
        """

    @abc.abstractmethod
    def progress(self) -> float:
        """Returns how much of the search is done, from 0 to 1 (1 once it has shut down)."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Returns the search's state: strict JSON (no NaN or infinity), a fresh copy."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replaces the search's state with one that :meth:`state_dict` returned.

        Args:
            state: The state, saved by a method built from the same config.

        Raises:
            SearcherError: If the state is for another searcher, another config
                or another layout version.
        """

    def _to_loss(self, metric: float) -> float:
        """Turns a reported metric into a loss: smaller is better, NaN is +inf."""
        if isinstance(metric, bool) or not isinstance(metric, numbers.Real):
            raise TypeError(f"The searcher metric must be a real number. Received: {metric!r}")
        if math.isnan(metric):
            return math.inf
        return float(metric) if self._config.searcher.smaller_is_better else -float(metric)

    def _state_header(self) -> dict[str, Any]:
        return {"searcher": self.name, "version": STATE_VERSION, "config_digest": _config_digest(self._config)}

    def _check_state_header(self, state: dict[str, Any]) -> None:
        expected = self._state_header()
        received = {key: state.get(key) for key in expected} if isinstance(state, dict) else state
        if received != expected:
            raise SearcherError(
                f"This {self.name} search can only load a state saved by a search built from the same searcher "
                f"section, hyperparameters and experiment seed, layout version {STATE_VERSION}. "
                f"Expected: {expected}. Received: {received}"
            )


def _config_digest(config: ExperimentConfig) -> str:
    """A fingerprint of what decides a search's operations, to refuse a state saved under another config."""
    relevant = config.to_dict()
    relevant = {key: relevant[key] for key in ("searcher", "hyperparameters", "reproducibility")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode("utf-8")).hexdigest()


def encode_float(value: float) -> Union[float, str]:
    """Makes a float strict JSON: infinities become the strings "inf" and "-inf"."""
    return value if math.isfinite(value) else str(value)


def decode_float(value: Union[float, str]) -> float:
    """Reverses :func:`encode_float`."""
    return float(value)
