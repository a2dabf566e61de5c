"""The hook that cuts one long training session into workloads."""

from typing import Callable, Optional, Protocol

import tensorflow as tf

from det_estimator import _horovod
from det_estimator.hooks import _input_state


class WorkloadListener(Protocol):
    """What the control hook calls back into (the trial controller)."""

    def on_session_start(self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver) -> None:
        """The training session exists and holds the initial or restored variables."""

    def on_workload_end(
        self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver, batches: int, stopping: str
    ) -> bool:
        """A workload ended after ``batches`` batches; returns whether training stops now.

        ``stopping`` is "" when nothing asks training to stop, else why it would stop
        after this batch: "end" (``max_batches`` reached; the listener may raise
        ``max_batches`` and go on), "pause" or "request_stop".
        """

    def on_batch_end(self, batches: int) -> None:
        """A batch ended; ``batches`` are trained so far."""


class WorkloadControlHook(tf.estimator.SessionRunHook):
    """Pauses the training session at the end of every workload for the controller.

    Placed last among the training hooks, so that it sees a ``request_stop()`` from
    any other hook in the same step. Between workloads the controller validates and
    checkpoints from ``after_run`` while the session stays open, which avoids
    rebuilding the graph and restoring variables for every workload.

    With several processes, every step also sums two flags over all ranks, "pause
    requested" and "stop requested", so that all of them stop after the same batch
    however the pause reached them, and whichever rank's hook asked to stop. A rank whose
    hook calls ``request_stop()`` has already fed this step's flags, so its request is
    held over to the next step: every rank then stops after that one, a batch after the
    request. Stopping at once, that rank would leave the others waiting in the next
    step's collectives.

    Call :meth:`start` before each training session it is a hook of.

    Args:
        listener: the controller.
        workload_length: called as a workload begins, with the batches to train in all;
            returns the workload's batches (``scheduling_unit``, or fewer where a period
            falls due: the trial controller's rule).
        pause_requested: called before every step; True once a pause was asked for.
        loss_accumulators: returns ``(loss_sum, loss_batches)``, the local variables in
            which the training graph sums its loss, once the model_fn has built them;
            they are read and reset at the end of every workload.
    """

    def __init__(
        self,
        listener: WorkloadListener,
        workload_length: Callable[[int], int],
        pause_requested: Callable[[], bool],
        loss_accumulators: Callable[[], tuple[Optional[tf.Variable], Optional[tf.Variable]]] = lambda: (None, None),
    ):
        self._listener = listener
        self._workload_length = workload_length
        self._workload_end: Optional[int] = None  # the batch the workload under way ends at (None: none yet)
        self._pause_requested = pause_requested
        self._loss_accumulators = loss_accumulators
        self.batches = 0
        self.max_batches = 0
        self._restore_input_from: Optional[str] = None
        self.workload_loss = float("nan")
        self.workload_summaries: dict = {}

    def start(self, batches_done: int, max_batches: int, restore_input_from: Optional[str] = None) -> None:
        """Sets where the next training session starts and ends.

        Args:
            batches_done: batches this trial had trained before this session.
            max_batches: batches after which training ends (the listener may raise it
                between workloads, through the ``max_batches`` attribute).
            restore_input_from: a directory where this process's input iterator state was
                saved (:mod:`det_estimator.hooks._input_state`): the input continues from
                there instead of from its start.
        """
        self.batches = batches_done
        self.max_batches = max_batches
        self._restore_input_from = restore_input_from
        self._workload_end = None

    def begin(self) -> None:
        # The graph is finalized after begin(): anything the hook needs is built now.
        # Each save is for the validation or checkpoint of one workload, and copied from by
        # then: keeping only the newest bounds the scratch model_dir at one model's size,
        # where every workload's would pile up in the temporary directory as long as the trial runs.
        self._saver = tf.compat.v1.train.Saver(max_to_keep=1, save_relative_paths=True)
        self.input_saver = _input_state.input_saver()
        self._loss_sum, self._loss_batches = self._loss_accumulators()
        self._reset_loss = None
        if self._loss_sum is not None:
            self._reset_loss = tf.compat.v1.variables_initializer([self._loss_sum, self._loss_batches])
        self._flags = None
        self._local_pause = False
        # A request_stop() this rank's hooks made, not yet fed to the other ranks.
        self._stop_held_over = False
        # Scalar summaries are fetched with the last step of each workload, in the same run,
        # so reading them never consumes a batch of its own.
        scalars = [
            summary
            for summary in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
            if summary.op.type == "ScalarSummary"
        ]
        self._scalar_summaries = tf.compat.v1.summary.merge(scalars) if scalars else None
        if _horovod.is_distributed():
            # [pause requested, stop requested] on this rank; their sums over all ranks.
            self._flags = tf.compat.v1.placeholder(tf.int32, shape=[2], name="det_control_flags")
            self._flags_summed = _horovod.allreduce_sum(self._flags, name="det_control_requested")

    def after_create_session(self, session: tf.compat.v1.Session, coord) -> None:
        self._listener.on_session_start(session, self._saver)

    def before_run(self, run_context: tf.estimator.SessionRunContext) -> Optional[tf.estimator.SessionRunArgs]:
        if self._restore_input_from is not None:
            # Here rather than in after_create_session: the Estimator initializes its iterator
            # in another hook's after_create_session, which may run after this hook's.
            _input_state.restore_input_state(run_context.session, self.input_saver, self._restore_input_from)
            self._restore_input_from = None
        fetches = {}
        if self._workload_end is None:
            # Here rather than at the last workload's end: an initial validation may have run since.
            self._workload_end = self.batches + self._workload_length(self.max_batches)
        next_batch = self.batches + 1
        paused = bool(self._pause_requested())
        # A pause ends the workload at this batch: its summaries are fetched too, or the
        # partial workload would be reported with its loss alone.
        if self._scalar_summaries is not None and (
            next_batch >= self._workload_end or next_batch >= self.max_batches or paused
        ):
            fetches["summaries"] = self._scalar_summaries
        if self._flags is None:
            # One process: usually nothing to fetch, so the step costs what it would without this hook.
            self._local_pause = paused
            return tf.estimator.SessionRunArgs(fetches) if fetches else None
        fetches["requested"] = self._flags_summed
        flags = [int(paused), int(self._stop_held_over)]
        return tf.estimator.SessionRunArgs(fetches, feed_dict={self._flags: flags})

    def after_run(self, run_context: tf.estimator.SessionRunContext, run_values) -> None:
        self.batches += 1
        results = run_values.results or {}
        if "summaries" in results:
            parsed = tf.compat.v1.Summary.FromString(results["summaries"])
            self.workload_summaries = {value.tag: float(value.simple_value) for value in parsed.value}
        if self._flags is None:
            paused, stop_requested = self._local_pause, run_context.stop_requested
        else:
            paused, stop_requested = (bool(flag > 0) for flag in results["requested"])
            if run_context.stop_requested and not stop_requested:
                # This rank's hook asked to stop after this step, which the others do not
                # know of: stop with them after the next. The request is withdrawn here
                # (this hook runs last), before the session acts on it.
                self._stop_held_over = True
                run_context._stop_requested = False
        stopping = ""
        if self.batches >= self.max_batches:
            stopping = "end"
        elif paused:
            stopping = "pause"
        elif stop_requested:
            stopping = "request_stop"
        if stopping or self._workload_end is not None and self.batches >= self._workload_end:
            self._workload_end = None
            self.workload_loss = self._take_workload_loss(run_context.session)
            stop = self._listener.on_workload_end(run_context.session, self._saver, self.batches, stopping)
            self.workload_summaries = {}
            if stop:
                run_context.request_stop()
        else:
            self._listener.on_batch_end(self.batches)

    def _take_workload_loss(self, session: tf.compat.v1.Session) -> float:
        """The mean training loss of this workload on this rank; the sums start again from 0."""
        if self._reset_loss is None:
            return float("nan")
        loss_sum, batches = session.run([self._loss_sum, self._loss_batches])
        session.run(self._reset_loss)
        return float(loss_sum / batches) if batches else float("nan")
