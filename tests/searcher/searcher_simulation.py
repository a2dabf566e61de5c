"""An orchestrator in miniature: drives a search method with synthetic trials and checks the protocol.

A synthetic trial's validation metric is a known function of its hyperparameters
and length, so that tests know which trial is best. Events are delivered in an
order chosen by a seeded random generator (or first come, first served), and
every operation is checked against the protocol as it arrives: request ids in
creation order, lengths that grow, no operation for a finished trial, exactly
one Shutdown and nothing after it.
"""

import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.searcher import (
    Close,
    Create,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    ValidateAfter,
    make_search_method,
)

HPARAMS = {
    "global_batch_size": 32,
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
    "units": {"type": "int", "minval": 1, "maxval": 8},
}


def make_config(searcher: dict, hyperparameters: Optional[dict] = None, seed: int = 7, max_length: int = 6400):
    """An experiment config with the given searcher keys (``metric`` and ``max_length`` filled in)."""
    section = {"metric": "loss", "max_length": {"batches": max_length}, **searcher}
    raw = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": HPARAMS if hyperparameters is None else hyperparameters,
        "searcher": section,
        "reproducibility": {"experiment_seed": seed},
    }
    return load_experiment_config(raw)


def quality(hparams: dict) -> float:
    """The known part of the synthetic metric: smallest at x = 0.3."""
    return (hparams["x"] - 0.3) ** 2


def loss_curve(hparams: dict, length: int) -> float:
    """Synthetic validation loss: quality plus a term that shrinks with training."""
    return quality(hparams) + 1.0 / length


@dataclass(frozen=True)
class Event:
    """One report to the search method."""

    kind: str  # "validation", "closed" or "exited"
    request_id: int
    metric: Optional[float] = None
    length: Optional[int] = None
    reason: Optional[ExitedReason] = None


def apply(method: SearchMethod, event: Event) -> list[Operation]:
    """Reports an event to a search method and returns its operations."""
    if event.kind == "validation":
        return method.on_validation_completed(event.request_id, event.metric, event.length)
    if event.kind == "closed":
        return method.on_trial_closed(event.request_id)
    return method.on_trial_exited_early(event.request_id, event.reason)


@dataclass
class Trial:
    hparams: dict
    seed: int
    lengths: list = field(default_factory=list)  # every ValidateAfter length, in order
    metrics: list = field(default_factory=list)  # (length, metric) reported
    closed: bool = False
    exited: Optional[ExitedReason] = None
    holding: bool = False  # holds a slot: training, or closing right after its validation


class Simulation:
    """Runs a search method to its end.

    Args:
        method: A new search method.
        metric: ``metric(hparams, length)``: the value a trial reports.
        order: None to deliver events first come, first served; an int seeds a
            random choice among the pending events.
        exit_at: ``exit_at(request_id, hparams, length)``: a reason to make the
            trial exit instead of validating, or None.
        group: ``group(request_id, trial)``: the key under which running trials
            are counted for concurrency (e.g. the ASHA bracket); one group by default.
        cancel_waiting: ``cancel_waiting(request_id)``: whether to cancel the trial
            (USER_CANCELED) when it waits for a promotion (promotion-based ASHA),
            unless it is promoted or closed first.
    """

    def __init__(
        self,
        method: SearchMethod,
        metric: Callable[[dict, int], float] = loss_curve,
        order: Optional[int] = 0,
        exit_at: Callable[[int, dict, int], Optional[ExitedReason]] = lambda *_: None,
        group: Callable[[int, Trial], Any] = lambda *_: None,
        cancel_waiting: Callable[[int], bool] = lambda _: False,
    ) -> None:
        self.method = method
        self._metric = metric
        self._rng = None if order is None else random.Random(order)
        self._exit_at = exit_at
        self._group = group
        self._cancel_waiting = cancel_waiting
        self.trials: dict[int, Trial] = {}
        self.pending: dict[int, Any] = {}  # request id -> ("validate", length) or ("close",)
        self.records: list[tuple[Optional[Event], list[Operation]]] = []
        self.shutdown: Optional[Shutdown] = None
        self.max_running: dict[Any, int] = {}

    def run(self, max_events: int = 200_000) -> "Simulation":
        self._take(None, self.method.initial_operations())
        while self.pending:
            assert len(self.records) < max_events, "the search does not end"
            ids = list(self.pending)
            request_id = ids[0] if self._rng is None else ids[self._rng.randrange(len(ids))]
            event = self._event_for(request_id)
            self._take(event, apply(self.method, event))
        assert self.shutdown is not None, "every trial finished but the search did not shut down"
        return self

    @property
    def events(self) -> list[Event]:
        return [event for event, _ in self.records[1:]]

    def _event_for(self, request_id: int) -> Event:
        task = self.pending.pop(request_id)
        trial = self.trials[request_id]
        if task[0] == "close":
            trial.closed = True
            return Event("closed", request_id)
        if task[0] == "cancel":
            trial.exited = ExitedReason.USER_CANCELED
            return Event("exited", request_id, reason=ExitedReason.USER_CANCELED)
        length = task[1]
        reason = self._exit_at(request_id, trial.hparams, length)
        if reason is not None:
            trial.exited = reason
            return Event("exited", request_id, reason=reason)
        value = self._metric(trial.hparams, length)
        trial.metrics.append((length, value))
        return Event("validation", request_id, metric=value, length=length)

    def _take(self, event: Optional[Event], ops: list[Operation]) -> None:
        self.records.append((event, ops))
        for op in ops:
            assert self.shutdown is None, f"{op} after Shutdown"
            self._check_and_apply(op)
        if event is not None and (event.kind != "validation" or event.request_id not in self.pending):
            # Closed, exited, or (promotion-based ASHA) waiting for a promotion: no slot.
            self.trials[event.request_id].holding = False
            if event.kind == "validation" and self._cancel_waiting(event.request_id):
                self.pending[event.request_id] = ("cancel",)
        running: dict[Any, int] = {}
        for request_id, trial in self.trials.items():
            if trial.holding:
                key = self._group(request_id, trial)
                running[key] = running.get(key, 0) + 1
        for key, count in running.items():
            self.max_running[key] = max(self.max_running.get(key, 0), count)

    def _check_and_apply(self, op: Operation) -> None:
        if isinstance(op, Create):
            assert op.request_id == len(self.trials), f"{op} out of order"
            json.dumps(op.to_dict(), allow_nan=False)
            self.trials[op.request_id] = Trial(op.hparams, op.trial_seed)
            return
        if isinstance(op, Shutdown):
            assert not self.pending, f"Shutdown with trials pending: {self.pending}"
            self.shutdown = op
            return
        if self.pending.get(op.request_id) == ("cancel",):
            del self.pending[op.request_id]  # promoted or closed before the cancel came
        trial = self.trials[op.request_id]
        assert not trial.closed and trial.exited is None, f"{op} for a finished trial"
        assert op.request_id not in self.pending, f"{op} while {self.pending[op.request_id]} is pending"
        if isinstance(op, ValidateAfter):
            assert not trial.lengths or op.length > trial.lengths[-1], f"{op} does not train further"
            trial.lengths.append(op.length)
            trial.holding = True
            self.pending[op.request_id] = ("validate", op.length)
        elif isinstance(op, Close):
            self.pending[op.request_id] = ("close",)


def simulate(config: ExperimentConfig, **kwargs: Any) -> Simulation:
    """Builds the config's search method and runs it to its end."""
    return Simulation(make_search_method(config), **kwargs).run()


def check_resumes_everywhere(config: ExperimentConfig, stops: Optional[list] = None, **kwargs: Any) -> int:
    """Checks that a search saved after any k events and loaded into a new method continues identically.

    Runs the search once, then for each k in ``stops`` (every k by default)
    replays the first k events into a fresh method, saves its state through
    strict JSON, loads it into another fresh method and checks that this one
    returns exactly the original operations for every remaining event.

    Returns:
        The number of events of the search.
    """
    original = simulate(config, **kwargs)
    events = original.events
    for k in range(len(events) + 1) if stops is None else stops:
        first = make_search_method(config)
        first.initial_operations()
        for event in events[:k]:
            apply(first, event)
        state = json.loads(json.dumps(first.state_dict(), allow_nan=False))
        resumed = make_search_method(config)
        resumed.load_state_dict(state)
        assert resumed.state_dict() == state
        assert resumed.progress() == first.progress()
        for index, (event, ops) in enumerate(original.records[k + 1 :], start=k):
            assert apply(resumed, event) == ops, f"resumed after {k} events, event {index} ({event}) differs"
    return len(events)
