"""One bracket of an ``adaptive_asha`` search: successive halving over its rungs, asynchronously.

Each rung keeps the losses recorded there, best first; among equal losses the
newer entry comes first ("ties favour the newcomer"). A rung of ``n`` entries
lets its top ``max(floor(n / divisor), 1)`` go on to the next rung.

Stopping-based (``stop_once: true``): a trial reaching a rung goes on at once if
its rank is within that top, and is closed otherwise.

Promotion-based (``stop_once: false``): a trial reaching a rung waits, holding no
slot, until it enters the top; it is then promoted (a ValidateAfter for the next
rung). Once no trial can reach a rung any more, the trials still waiting there
are closed. A trial that exited early is never promoted.

Both: an early exit records +inf (the worst loss) at the rung the trial was
training for; a trial at the top rung is closed; a slot frees when its trial
closes, exits or starts waiting, and the bracket then creates its next trial
until it has created ``max_trials``.
"""

import bisect
import math
from fractions import Fraction
from typing import Any, Callable

from det_estimator.config import AshaBracket
from det_estimator.searcher._base import SearcherError, decode_float, encode_float
from det_estimator.searcher._operations import Close, Create, Operation, ValidateAfter

_RUNNING = "running"  # a ValidateAfter is outstanding
_WAITING = "waiting"  # promotion-based: reached a rung, waits to be promoted
_CLOSING = "closing"  # Close was sent


class Bracket:
    """The state and rules of one bracket.

    Args:
        plan: The bracket's rungs, trial budget and concurrency.
        divisor: ``searcher.divisor``.
        stop_once: True for stopping-based, False for promotion-based.
        label: How messages name the bracket's search.
    """

    def __init__(self, plan: AshaBracket, divisor: float, stop_once: bool, label: str) -> None:
        self._plan = plan
        self._divisor = Fraction(divisor)
        self._stop_once = stop_once
        self._label = label
        self._top = plan.num_rungs - 1
        self.created = 0
        self.closed = 0
        self.exited = 0
        self._arrivals = 0  # orders equal losses: a later arrival ranks first
        # Per rung: (loss, -arrival, request id), sorted, so the best and then the newest come first.
        self._rungs: list[list[tuple[float, int, int]]] = [[] for _ in range(plan.num_rungs)]
        self._promoted: list[set[int]] = [set() for _ in range(plan.num_rungs)]
        self._dead: set[int] = set()  # exited early; never promoted
        # Unfinished trials: request id -> [rung it trains for or waits at, status, holds a slot].
        self._live: dict[int, list[Any]] = {}

    @property
    def done(self) -> bool:
        """Whether every trial of the bracket has been created and has finished."""
        return self.created == self._plan.max_trials and not self._live

    def fill(self, new_trial: Callable[[], Create]) -> list[Operation]:
        """Creates trials in the bracket's free slots while its budget lasts.

        Args:
            new_trial: Makes the Create of the search's next trial.

        Returns:
            Each Create followed by the trial's first ValidateAfter.
        """
        ops: list[Operation] = []
        limit = self._plan.max_concurrent_trials
        while self.created < self._plan.max_trials and (limit == 0 or self._slots_in_use() < limit):
            create = new_trial()
            self.created += 1
            self._live[create.request_id] = [0, _RUNNING, True]
            ops += [create, ValidateAfter(create.request_id, self._plan.rung_lengths[0])]
        return ops

    def on_validation(
        self, request_id: int, loss: float, length: int, new_trial: Callable[[], Create]
    ) -> list[Operation]:
        """Records a trial's loss at its rung and decides what it does next."""
        rung = self._require(request_id, _RUNNING)[0]
        expected = self._plan.rung_lengths[rung]
        if length != expected:
            raise SearcherError(
                f"Trial {request_id} of the {self._label} was asked to validate after {expected}. "
                f"Received a validation after: {length!r}"
            )
        rank = self._record(rung, loss, request_id)
        if rung == self._top:
            # Its slot frees when it has closed (on_closed).
            return self._close(request_id)
        if self._stop_once:
            if rank < self._threshold(rung):
                self._live[request_id][0] = rung + 1
                return [ValidateAfter(request_id, self._plan.rung_lengths[rung + 1])]
            return self._close(request_id)
        self._live[request_id][1:] = [_WAITING, False]
        return self._promote(rung) + self.fill(new_trial) + self._close_unpromotable()

    def on_closed(self, request_id: int, new_trial: Callable[[], Create]) -> list[Operation]:
        """Forgets a closed trial and fills the slot it held, if any."""
        self._require(request_id, _CLOSING)
        del self._live[request_id]
        self.closed += 1
        return self.fill(new_trial)

    def on_exited(self, request_id: int, new_trial: Callable[[], Create]) -> list[Operation]:
        """Records an early exit as the worst loss at the trial's rung."""
        rung, status, _ = self._require(request_id, _RUNNING, _WAITING, _CLOSING)
        if status == _CLOSING:
            return self.on_closed(request_id, new_trial)
        del self._live[request_id]
        self._dead.add(request_id)
        self.exited += 1
        if status == _WAITING:
            # Its loss at this rung stands; it just can no longer be promoted.
            return []
        self._record(rung, math.inf, request_id)
        if self._stop_once:
            return self.fill(new_trial)
        return self._promote(rung) + self.fill(new_trial) + self._close_unpromotable()

    def state_dict(self) -> dict[str, Any]:
        """Returns the bracket's state, strict JSON."""
        return {
            "created": self.created,
            "closed": self.closed,
            "exited": self.exited,
            "arrivals": self._arrivals,
            "rungs": [[[encode_float(loss), order, rid] for loss, order, rid in rung] for rung in self._rungs],
            "promoted": [sorted(ids) for ids in self._promoted],
            "dead": sorted(self._dead),
            "live": [[rid, *trial] for rid, trial in self._live.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""
        self.created, self.closed, self.exited = state["created"], state["closed"], state["exited"]
        self._arrivals = state["arrivals"]
        self._rungs = [[(decode_float(loss), order, rid) for loss, order, rid in rung] for rung in state["rungs"]]
        self._promoted = [set(ids) for ids in state["promoted"]]
        self._dead = set(state["dead"])
        self._live = {rid: [rung, status, slot] for rid, rung, status, slot in state["live"]}

    def _require(self, request_id: int, *statuses: str) -> list[Any]:
        trial = self._live.get(request_id)
        if trial is not None and trial[1] in statuses:
            return trial
        state = "has already finished" if trial is None else f"is {trial[1]}, not {' or '.join(statuses)}"
        raise SearcherError(f"Trial {request_id} of the {self._label} {state}.")

    def _slots_in_use(self) -> int:
        return sum(1 for _, _, slot in self._live.values() if slot)

    def _threshold(self, rung: int) -> int:
        return max(math.floor(len(self._rungs[rung]) / self._divisor), 1)

    def _record(self, rung: int, loss: float, request_id: int) -> int:
        """Inserts a loss at a rung and returns its rank there (0 for the best)."""
        self._arrivals += 1
        entry = (loss, -self._arrivals, request_id)
        rank = bisect.bisect_left(self._rungs[rung], entry)
        self._rungs[rung].insert(rank, entry)
        return rank

    def _close(self, request_id: int) -> list[Operation]:
        self._live[request_id][1] = _CLOSING
        return [Close(request_id)]

    def _promote(self, rung: int) -> list[Operation]:
        """Promotes the live trials of the rung's top that were not promoted yet.

        At most one trial is new to the top after one arrival, and that arrival
        freed a slot, so a promoted trial never waits for a slot.
        """
        ops: list[Operation] = []
        for _, _, request_id in self._rungs[rung][: self._threshold(rung)]:
            if request_id in self._promoted[rung]:
                continue
            self._promoted[rung].add(request_id)
            if request_id not in self._dead:
                self._live[request_id] = [rung + 1, _RUNNING, True]
                ops.append(ValidateAfter(request_id, self._plan.rung_lengths[rung + 1]))
        return ops

    def _close_unpromotable(self) -> list[Operation]:
        """Closes the trials waiting at rungs that no trial can reach any more: their rank is final."""
        ops: list[Operation] = []
        reachable = self.created < self._plan.max_trials  # trials still to create will reach rung 0
        for rung in range(self._top):
            reachable = reachable or any(r == rung and s == _RUNNING for r, s, _ in self._live.values())
            if reachable:
                return ops
            waiting = sorted(rid for rid, (r, s, _) in self._live.items() if r == rung and s == _WAITING)
            for request_id in waiting:
                ops += self._close(request_id)
        return ops
