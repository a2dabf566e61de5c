"""The ``adaptive_asha`` searcher: asynchronous successive halving over several brackets.

The brackets (their rungs, trial budgets and concurrency) come from
:meth:`det_estimator.config.SearcherConfig.asha_brackets`; each runs on its own
(see :mod:`det_estimator.searcher._asha_bracket`). This module numbers the
trials across brackets, draws their hyperparameters and ends the search.
"""

import functools
from dataclasses import dataclass
from typing import Any, Optional

from det_estimator.config import ExperimentConfig, searcher_key
from det_estimator.searcher._asha_bracket import Bracket
from det_estimator.searcher._base import SearcherError, SearchMethod, decode_float
from det_estimator.searcher._operations import Create, ExitedReason, Operation, Shutdown
from det_estimator.searcher._seeds import trial_seed


class AdaptiveASHASearch(SearchMethod):
    """Adaptive ASHA: brackets of successive halving that stop (or pause) the worse trials early.

    Trials get hyperparameters drawn at random, as in the random searcher, and
    their seed derived from the experiment seed and their request id. Each
    bracket creates its share of ``max_trials``, starting a new trial whenever
    one of its slots frees; a trial stopped below the top rung counts toward
    ``max_trials``, and an early exit of any reason (InvalidHP included) counts
    as the worst loss at its rung. Not built on Optuna: its pruners have no
    equivalent of the standard mode, ``bracket_rungs`` or promotion-based ASHA.

    Args:
        config: An experiment config whose ``searcher.name`` is "adaptive_asha".
    """

    name = "adaptive_asha"

    def __init__(self, config: ExperimentConfig) -> None:
        super().__init__(config)
        searcher = config.searcher
        divisor = searcher_key(searcher.divisor, "divisor")
        stop_once = searcher_key(searcher.stop_once, "stop_once")
        self._brackets = [
            Bracket(plan, divisor, stop_once, f"{self.name} search (bracket {index})")
            for index, plan in enumerate(searcher.asha_brackets())
        ]
        self._max_trials = searcher_key(searcher.max_trials, "max_trials")
        self._started = False
        self._shut_down = False
        self._bracket_of: list[int] = []  # request id -> bracket index

    def initial_operations(self) -> list[Operation]:
        """Creates each bracket's first trials, the bracket with the most rungs first (see :class:`SearchMethod`)."""
        if self._started:
            raise SearcherError(f"initial_operations of the {self.name} search was already called.")
        self._started = True
        ops: list[Operation] = []
        for index, bracket in enumerate(self._brackets):
            ops += bracket.fill(self._creator(index))
        return ops

    def on_validation_completed(self, request_id: int, metric: float, length: int) -> list[Operation]:
        """Ranks the trial at its rung: it goes on, waits or is closed (see :class:`SearchMethod`)."""
        index = self._bracket_index(request_id)
        loss = self._to_loss(metric)
        return self._finish(self._brackets[index].on_validation(request_id, loss, length, self._creator(index)))

    def on_trial_closed(self, request_id: int) -> list[Operation]:
        """Starts the bracket's next trial in the freed slot (see :class:`SearchMethod`)."""
        index = self._bracket_index(request_id)
        return self._finish(self._brackets[index].on_closed(request_id, self._creator(index)))

    def on_trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Operation]:
        """Records the worst loss at the trial's rung (see :class:`SearchMethod`)."""
        ExitedReason(reason)  # every reason is treated alike; this only rejects a value that is none
        index = self._bracket_index(request_id)
        return self._finish(self._brackets[index].on_exited(request_id, self._creator(index)))

    def progress(self) -> float:
        """Returns the fraction of ``max_trials`` that have finished (closed or exited)."""
        if self._shut_down:
            return 1.0
        return sum(bracket.closed + bracket.exited for bracket in self._brackets) / self._max_trials

    def state_dict(self) -> dict[str, Any]:
        """Returns the search's state (see :class:`SearchMethod`)."""
        return {
            **self._state_header(),
            "started": self._started,
            "shut_down": self._shut_down,
            "bracket_of": list(self._bracket_of),
            "brackets": [bracket.state_dict() for bracket in self._brackets],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a state from :meth:`state_dict` (see :class:`SearchMethod`)."""
        self._check_state_header(state)
        self._started = state["started"]
        self._shut_down = state["shut_down"]
        self._bracket_of = list(state["bracket_of"])
        for bracket, bracket_state in zip(self._brackets, state["brackets"]):
            bracket.load_state_dict(bracket_state)

    def _bracket_index(self, request_id: int) -> int:
        if self._shut_down:
            raise SearcherError(f"The {self.name} search has shut down. Received an event for trial {request_id!r}")
        if (
            isinstance(request_id, bool)
            or not isinstance(request_id, int)
            or not 0 <= request_id < len(self._bracket_of)
        ):
            raise SearcherError(f"Trial {request_id!r} of the {self.name} search was never created.")
        return self._bracket_of[request_id]

    def _creator(self, index: int) -> Any:
        return functools.partial(self._new_trial, index)

    def _new_trial(self, index: int) -> Create:
        request_id = len(self._bracket_of)
        self._bracket_of.append(index)
        seed = trial_seed(self._config.reproducibility.experiment_seed, request_id)
        return Create(request_id, self._config.sample_hyperparameters(seed), seed)

    def _finish(self, ops: list[Operation]) -> list[Operation]:
        """Appends Shutdown once every bracket is done."""
        if all(bracket.done for bracket in self._brackets):
            self._shut_down = True
            closed = sum(bracket.closed for bracket in self._brackets)
            ops.append(Shutdown(failure=closed == 0))
        return ops


@dataclass(frozen=True)
class Rung:
    """One rung of an ``adaptive_asha`` search as its saved state has it: who reached it, with what loss.

    Attributes:
        bracket: the bracket's index (0 has the most rungs).
        index: the rung's index in its bracket (0 is the shortest).
        length: the training length of the rung, in the unit of ``searcher.max_length``.
        entries: ``(request id, loss)`` of each trial recorded there, best first; the loss
            is the searcher metric with its sign made "smaller is better" (+inf for a trial
            that exited early there).
    """

    bracket: int
    index: int
    length: int
    entries: tuple[tuple[int, float], ...]


def asha_rungs(config: ExperimentConfig, state: Optional[dict[str, Any]]) -> list[Rung]:
    """The rungs of an ``adaptive_asha`` search and the trials that reached each, from its saved state.

    Read here, beside the code that writes that state, so that a page showing the rungs
    does not depend on its layout.

    Args:
        config: the experiment's config; its searcher must be ``adaptive_asha``.
        state: what :meth:`AdaptiveASHASearch.state_dict` returned, or None before the search started.
    """
    plans = config.searcher.asha_brackets()
    saved = (state or {}).get("brackets") or [{} for _ in plans]
    rungs = []
    for bracket, (plan, bracket_state) in enumerate(zip(plans, saved)):
        recorded = bracket_state.get("rungs") or [[] for _ in plan.rung_lengths]
        for index, (length, entries) in enumerate(zip(plan.rung_lengths, recorded)):
            reached = tuple((int(request_id), decode_float(loss)) for loss, _, request_id in entries)
            rungs.append(Rung(bracket, index, length, reached))
    return rungs
