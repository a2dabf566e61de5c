"""PreemptContext: whether the trial should checkpoint and stop now; ``core_context.preempt``."""

import contextlib
import enum
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any, Callable, Optional

from det_estimator import _heartbeat
from det_estimator._heartbeat import HeartbeatWriter
from det_estimator.core._distributed import DistributedContext
from det_estimator.errors import PermanentTrialError

# How often the watcher looks at the pause file, the store and the launcher.
_POLL_SECONDS = 0.2
# The exit status of a process that ends because its launcher is gone.
ORPHANED_EXIT_STATUS = 1


class PreemptMode(enum.Enum):
    """Who calls :meth:`PreemptContext.should_preempt`, and how the answer is shared.

    ``WorkersAskChief`` (the default): every process calls it at the same point and gets
    the same answer (True as soon as any process was asked to stop). ``ChiefOnly``: only
    the chief calls it; it tells the others itself. ``WorkersAskMaster``: each process
    gets its own answer without a collective.
    """

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PauseWatcher:
    """Notices a request to stop: a signal, the launcher's pause file, or a pause recorded in the store.

    A daemon thread polls the file and the store every 0.2 s, so that
    :meth:`requested` costs nothing and can be called every batch. It also ends the
    process when its launcher is gone (see :meth:`exit_if_orphaned`).

    Args:
        pause_file: the file whose creation asks the trial to pause.
        store_pause_requested: returns True once ``experiment pause`` recorded a request
            in the store (the chief of a recorded trial only).
        launcher_gone: returns True once the process that launched the run is gone
            (a launched run only).
        heartbeat: tells the launcher of this process's progress, and dumps its stacks
            when the launcher asks (a launched trial run only).
    """

    def __init__(
        self,
        pause_file: Optional[str] = None,
        store_pause_requested: Optional[Callable[[], bool]] = None,
        launcher_gone: Optional[Callable[[], bool]] = None,
        heartbeat: Optional[HeartbeatWriter] = None,
    ) -> None:
        self._pause_file = pause_file
        self._heartbeat = heartbeat
        self._store_pause_requested = store_pause_requested
        self._launcher_gone = launcher_gone
        self._event = threading.Event()
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def request(self) -> None:
        """Asks for a pause from this process (what SIGTERM and SIGINT do)."""
        self._event.set()

    def requested(self) -> bool:
        """Whether a pause was asked for, by any of the means watched."""
        return self._event.is_set()

    def start(self) -> None:
        watched = (self._pause_file, self._store_pause_requested, self._launcher_gone, self._heartbeat)
        if self._thread is None and any(watched):
            self._thread = threading.Thread(target=self._poll, name="det-estimator-pause-watcher", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stopped.set()

    def exit_if_orphaned(self) -> None:
        """Ends this process at once, writing nothing more, if the launcher of its run is gone.

        With its launcher gone the experiment reads INTERRUPTED, and ``experiment
        resume`` may already be starting another run of the trial, which clears the
        trial's unsealed checkpoints and picks the one to resume from: a checkpoint this
        process sealed, or the retention that follows it, would race with that run and
        could delete the checkpoint it resumes from. A process on one slot dies with its
        launcher (the kernel kills it); under horovodrun a process only gets a SIGTERM,
        which would otherwise pause it with a checkpoint.
        """
        if self._launcher_gone is not None and self._launcher_gone():
            # Nothing is printed: the output went to the launcher, and a write into a pipe
            # that no one reads any more can block (or raise) instead of ending the process.
            os._exit(ORPHANED_EXIT_STATUS)

    def _poll(self) -> None:
        while not self._stopped.wait(_POLL_SECONDS):
            self.exit_if_orphaned()
            if self._heartbeat is not None:
                self._heartbeat.tick()
            if self._event.is_set():
                if self._launcher_gone is None and self._heartbeat is None:
                    return  # nothing left to watch
                continue
            if self._pause_file and os.path.exists(self._pause_file):
                self._event.set()
            elif self._store_pause_requested is not None:
                with contextlib.suppress(Exception):  # a busy or briefly unreachable store: look again later
                    if self._store_pause_requested():
                        self._event.set()

    @contextlib.contextmanager
    def on_signals(self) -> Iterator[None]:
        """While inside, SIGTERM and SIGINT ask for a pause instead of ending the process.

        Only the main thread can install signal handlers; elsewhere this does nothing.
        The previous handlers come back on leaving.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, lambda *_: self.request()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class PreemptContext:
    """Tells a trial when to checkpoint and stop: ``core_context.preempt``.

    A pause is asked for by ``det-estimator experiment pause``, by Ctrl-C or SIGTERM to
    the command that runs the experiment, or by SIGTERM or SIGINT to a process of the
    trial. Call :meth:`should_preempt` regularly (every few seconds of work, or at every
    checkpoint); when it returns True, checkpoint and return. A trial that stops this
    way is PAUSED, and ``experiment resume`` continues it.

    Args:
        distributed: this process's place in the job.
        watcher: what notices pause requests on this process.
        acknowledge: records that the trial stops because it was asked to.
        mode: see :class:`PreemptMode`.
    """

    def __init__(
        self,
        distributed: DistributedContext,
        watcher: PauseWatcher,
        acknowledge: Callable[[], Any] = lambda: None,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
    ) -> None:
        self._distributed = distributed
        self._watcher = watcher
        self._acknowledge = acknowledge
        self._mode = PreemptMode(mode)
        self._acknowledged = False

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """Whether the trial should checkpoint and stop now.

        With the default mode every process must call it at the same point (it is a
        collective) and all get the same answer.

        Args:
            auto_ack: record at once that the trial obeys (then a clean exit counts as
                PAUSED, not COMPLETED). Pass False to decide later, and call
                :meth:`acknowledge_preemption_signal` before exiting if the trial stops.

        Raises:
            PermanentTrialError: ``ChiefOnly`` mode and called on another process.
        """
        _heartbeat.beat()  # a script that asks regularly is moving on
        local = self._watcher.requested()
        if self._mode == PreemptMode.WorkersAskChief:
            decision = any(self._distributed.allgather(local))
        elif self._mode == PreemptMode.ChiefOnly:
            if self._distributed.rank != 0:
                raise PermanentTrialError(
                    f"should_preempt() in ChiefOnly mode is for the chief; process {self._distributed.rank} called it."
                )
            decision = local
        else:
            decision = local
        if decision and auto_ack:
            self.acknowledge_preemption_signal()
        return decision

    def requested_locally(self) -> bool:
        """Whether this process was asked to pause; no collective, cheap enough for every batch.

        For harnesses that agree across processes by other means (a collective of their
        own framework, say).
        """
        return self._watcher.requested()

    def acknowledge_preemption_signal(self) -> None:
        """Records that the trial stops because it was asked to, so that its clean exit reads as PAUSED."""
        if not self._acknowledged:
            self._acknowledged = True
            if self._distributed.rank == 0:
                self._acknowledge()

    @property
    def acknowledged(self) -> bool:
        """Whether this process acknowledged a pause."""
        return self._acknowledged
