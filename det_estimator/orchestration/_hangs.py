"""The hang watch: a trial run none of whose processes makes progress for ``hang_timeout_seconds`` is hung.

A process stuck in a collective (its peer's data ran out, a peer wedged in the user's
code) waits for ever, and so do its peers. The launcher reads the processes' progress
counts (:mod:`det_estimator._heartbeat`) as it polls the run; once none has changed for
the timeout, it asks every process to dump its stacks into the trial's log, waits a
little for their answers, and ends the run as ERROR with a hang cause naming where each
process is. The failure then goes through the restart decision as any other.

The clock starts at the run's first progress: starting the processes, importing
TensorFlow and building the model take their own time, which a short timeout must not
count as a hang.
"""

import enum
import time
from collections.abc import Mapping
from typing import Callable, Optional

from det_estimator._heartbeat import StuckPlace
from det_estimator.lifecycle import ErrorKind, RunError

# How long the processes get to answer a dump request before the run is ended anyway
# (a process that holds Python's interpreter lock, or is gone, never answers).
DUMP_WAIT_SECONDS = 10.0
# When those that have not answered by then are sent the dump signal instead.
SIGNAL_AFTER_SECONDS = 3.0


class HangState(enum.Enum):
    """Where the watch of one run stands."""

    WATCHING = "watching"
    """Progress is recent (or none was made yet)."""
    DUMPING = "dumping"
    """No progress for the timeout: the processes were asked for their stacks."""
    HUNG = "hung"
    """Every process answered, or the wait for their answers is over: the run is to end."""


class HangWatch:
    """Decides, from the processes' progress counts, whether a run is hung; no process or file of its own.

    Args:
        timeout_seconds: how long without progress on any process counts as a hang; 0
            turns the watch off.
        slots: how many processes the run has.
        clock: seconds that only grow (``time.monotonic``; a fake in tests).
    """

    def __init__(self, timeout_seconds: float, slots: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_seconds = timeout_seconds
        self._slots = slots
        self._clock = clock
        self._counts: dict[int, int] = {}
        self._progress_at: Optional[float] = None  # the launcher's time of the last change seen
        self._dump_asked_at: Optional[float] = None
        self._signalled = False
        self.state = HangState.WATCHING

    def observe(self, counts: Mapping[int, int], answered: int = 0) -> HangState:
        """Takes the progress counts read now (rank to count) and how many processes answered a dump request.

        Returns the state after it: DUMPING when the run has just been found without
        progress for the timeout (ask for the stacks), HUNG once every process answered
        or :data:`DUMP_WAIT_SECONDS` passed.
        """
        now = self._clock()
        if self.state == HangState.WATCHING:
            if any(self._counts.get(rank) != count for rank, count in counts.items()):
                self._progress_at = now
            self._counts.update(counts)
            silent = None if self._progress_at is None else now - self._progress_at
            if self.timeout_seconds and silent is not None and silent >= self.timeout_seconds:
                self.state, self._dump_asked_at = HangState.DUMPING, now
        elif self.state == HangState.DUMPING and self._dump_asked_at is not None:
            waited = now - self._dump_asked_at
            if answered >= self._slots or waited >= DUMP_WAIT_SECONDS:
                self.state = HangState.HUNG
        return self.state

    def signal_due(self) -> bool:
        """True once per hang, :data:`SIGNAL_AFTER_SECONDS` after the dump request: time to signal the silent ones."""
        if self._signalled or self.state != HangState.DUMPING or self._dump_asked_at is None:
            return False
        self._signalled = self._clock() - self._dump_asked_at >= SIGNAL_AFTER_SECONDS
        return self._signalled

    @property
    def silent_seconds(self) -> float:
        """How long no progress was seen on any process (0 before the first)."""
        if self._progress_at is None:
            return 0.0
        until = self._dump_asked_at if self._dump_asked_at is not None else self._clock()
        return until - self._progress_at


def hang_error(silent_seconds: float, slots: int, places: Mapping[int, Optional[StuckPlace]]) -> RunError:
    """The error a hung run records: how long nothing moved, and where each process is.

    Args:
        silent_seconds: how long no process made progress.
        slots: the run's processes.
        places: rank to where it is stuck, for the processes that answered (None: no
            frame of the user's or det-estimator's code found).
    """
    where = []
    for rank in range(slots):
        if rank not in places:
            where.append(
                f"rank {rank} did not answer (a thread of it holds Python's interpreter lock, or it is gone; "
                "sent the dump signal, its stacks are in the log)"
            )
        else:
            place = places[rank]
            where.append(place.describe() if place is not None else f"rank {rank} outside Python code of its own")
    message = (
        f"no process made progress (a batch, a validation step, a checkpoint) for {silent_seconds:.0f} s, "
        f"so the trial is taken as hung: {'; '.join(where)}. Each process's Python stacks are in the trial's log; "
        "raise hang_timeout_seconds in the experiment config if it only needs longer"
    )
    # As a traceback reads, ending in the error's line: the restart decision compares its last frame.
    stuck = [(rank, place) for rank, place in sorted(places.items()) if place is not None]
    frames = [f"{place.frame_line()}  (rank {rank})" for rank, place in stuck]
    trace = "".join(f"{line}\n" for line in ["Where each rank is stuck:", *frames, f"Hang: {message}"])
    return RunError(ErrorKind.HANG, message, type="Hang", traceback=trace)
