"""The shared engine of searches whose trials each train to ``max_length`` in one go.

``single``, ``random``, ``grid`` and ``tpe`` differ only in how many trials they
run, how each trial's hyperparameters are chosen and whether a trial that
raised InvalidHP is replaced; the rest is here. Each trial gets
``ValidateAfter(max_length)``, then ``Close``; a slot frees when the trial has
closed or exited early, and the next trial is created in it.
"""

import abc
from typing import Any

from det_estimator.config import ExperimentConfig
from det_estimator.searcher._base import SearcherError, SearchMethod
from det_estimator.searcher._operations import Close, Create, ExitedReason, Operation, Shutdown, ValidateAfter

# A search whose trials keep raising InvalidHP (a bug in the trial, say) must end: after
# this many replacements per trial of the budget, the next InvalidHP ends the search
# (once the trials still running have finished), as failed if none completed.
MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL = 10

_RUNNING = "running"  # a ValidateAfter is outstanding
_CLOSING = "closing"  # Close was sent; the trial still holds its slot until it has closed


class FullLengthSearch(SearchMethod):
    """A search of ``total_trials`` trials, each trained to ``max_length``, ``max_concurrent`` at a time.

    Subclasses choose each new trial's hyperparameters and seed in
    :meth:`_new_trial`, and may keep state of their own in :meth:`_record_metric`,
    :meth:`_record_exit`, :meth:`_extra_state` and :meth:`_load_extra_state`.

    Args:
        config: The experiment config.
        total_trials: Trials in the search (replacements for InvalidHP not counted).
        max_concurrent: Trials running at once; 0 for no limit.
        replaces_invalid_hp: Whether a trial that exits with INVALID_HP is replaced.
    """

    def __init__(
        self, config: ExperimentConfig, total_trials: int, max_concurrent: int, replaces_invalid_hp: bool
    ) -> None:
        super().__init__(config)
        self._max_length = config.searcher.max_length.value
        self._total_trials = total_trials
        self._max_concurrent = max_concurrent
        self._replaces_invalid_hp = replaces_invalid_hp
        self._started = False
        self._shut_down = False
        self._next_request_id = 0
        self._counted = 0  # trials created that count toward total_trials
        self._replaced = 0  # trials that raised InvalidHP and were replaced
        self._closed = 0
        self._exited = 0  # early exits that count toward total_trials
        self._replacements_used_up = False  # an InvalidHP came after the last replacement allowed
        self._live: dict[int, str] = {}  # trials not finished yet: request id -> _RUNNING or _CLOSING

    @abc.abstractmethod
    def _new_trial(self, request_id: int, index: int) -> tuple[dict[str, Any], int]:
        """Returns the hyperparameters and seed of a new trial.

        Args:
            request_id: The trial's request id.
            index: How many counted trials were created before it (a replacement
                gets the index of the trial it replaces).
        """

    def _record_metric(self, request_id: int, loss: float) -> None:
        """Called with a trial's loss (smaller is better, NaN as +inf) when its validation completes."""

    def _record_exit(self, request_id: int, reason: ExitedReason) -> None:
        """Called when a running trial exits early."""

    def _extra_state(self) -> dict[str, Any]:
        """Returns the subclass's own state, strict JSON."""
        return {}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`_extra_state` returned."""

    def initial_operations(self) -> list[Operation]:
        """Creates the first trials, up to ``max_concurrent`` of them (see :class:`SearchMethod`)."""
        if self._started:
            raise SearcherError(f"initial_operations of the {self.name} search was already called.")
        self._started = True
        return self._fill()

    def on_validation_completed(self, request_id: int, metric: float, length: int) -> list[Operation]:
        """Records the trial's metric and closes it (see :class:`SearchMethod`)."""
        self._require(request_id, _RUNNING)
        if length != self._max_length:
            raise SearcherError(
                f"Trial {request_id} of the {self.name} search was asked to validate after {self._max_length}. "
                f"Received a validation after: {length!r}"
            )
        self._record_metric(request_id, self._to_loss(metric))
        self._live[request_id] = _CLOSING
        return [Close(request_id)]

    def on_trial_closed(self, request_id: int) -> list[Operation]:
        """Frees the trial's slot for the next trial (see :class:`SearchMethod`)."""
        self._require(request_id, _CLOSING)
        del self._live[request_id]
        self._closed += 1
        return self._fill()

    def on_trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Operation]:
        """Frees the trial's slot; replaces it if it raised InvalidHP and the searcher does so.

        See :class:`SearchMethod`.
        """
        status = self._require(request_id, _RUNNING, _CLOSING)
        reason = ExitedReason(reason)
        if status == _CLOSING:
            return self.on_trial_closed(request_id)
        del self._live[request_id]
        self._record_exit(request_id, reason)
        replace = self._replaces_invalid_hp and reason is ExitedReason.INVALID_HP
        if replace and self._replaced < MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL * self._total_trials:
            self._replaced += 1
            self._counted -= 1
        else:
            self._exited += 1
            self._replacements_used_up = self._replacements_used_up or replace
        return self._fill()

    def progress(self) -> float:
        """Returns the fraction of the search's trials that have finished."""
        if self._shut_down:
            return 1.0
        return (self._closed + self._exited) / self._total_trials

    def state_dict(self) -> dict[str, Any]:
        """Returns the search's state (see :class:`SearchMethod`)."""
        return {
            **self._state_header(),
            "started": self._started,
            "shut_down": self._shut_down,
            "next_request_id": self._next_request_id,
            "counted": self._counted,
            "replaced": self._replaced,
            "closed": self._closed,
            "exited": self._exited,
            "replacements_used_up": self._replacements_used_up,
            "live": [[request_id, status] for request_id, status in self._live.items()],
            "extra": self._extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a state from :meth:`state_dict` (see :class:`SearchMethod`)."""
        self._check_state_header(state)
        self._started = state["started"]
        self._shut_down = state["shut_down"]
        self._next_request_id = state["next_request_id"]
        self._counted = state["counted"]
        self._replaced = state["replaced"]
        self._closed = state["closed"]
        self._exited = state["exited"]
        # A state saved before the cap ended searches lacks the key.
        self._replacements_used_up = bool(state.get("replacements_used_up", False))
        self._live = {request_id: status for request_id, status in state["live"]}
        self._load_extra_state(state["extra"])

    def _require(self, request_id: int, *statuses: str) -> str:
        """Returns the trial's status, or raises if the search cannot take an event for it now."""
        if self._shut_down:
            raise SearcherError(f"The {self.name} search has shut down. Received an event for trial {request_id!r}")
        status = self._live.get(request_id)
        if status in statuses:
            return status
        if status is not None:
            state = "has no ValidateAfter outstanding" if status == _CLOSING else "was not sent Close"
        elif isinstance(request_id, int) and 0 <= request_id < self._next_request_id:
            state = "has already finished"
        else:
            state = "was never created"
        raise SearcherError(f"Trial {request_id!r} of the {self.name} search {state}.")

    def _fill(self) -> list[Operation]:
        """Creates trials in the free slots, and shuts the search down once every trial has finished."""
        ops: list[Operation] = []
        while (
            not self._replacements_used_up
            and self._counted < self._total_trials
            and (self._max_concurrent == 0 or len(self._live) < self._max_concurrent)
        ):
            request_id = self._next_request_id
            hparams, seed = self._new_trial(request_id, self._counted)
            self._next_request_id += 1
            self._counted += 1
            self._live[request_id] = _RUNNING
            ops += [Create(request_id, hparams, seed), ValidateAfter(request_id, self._max_length)]
        if not self._live and (self._counted == self._total_trials or self._replacements_used_up):
            self._shut_down = True
            ops.append(Shutdown(failure=self._closed == 0, reason=self._shutdown_reason()))
        return ops

    def _shutdown_reason(self) -> str:
        if not self._replacements_used_up:
            return ""
        cap = MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL * self._total_trials
        return (
            f"the search ended early: its trials raised InvalidHP more than the {cap} times it replaces them "
            f"({MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL} per trial of max_trials {self._total_trials}). Does the "
            "trial raise InvalidHP for every hyperparameter?"
        )
