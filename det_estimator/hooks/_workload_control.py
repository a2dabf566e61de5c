"""The hook that cuts one long training session into workloads."""

from typing import Callable, Optional, Protocol

import tensorflow as tf

from det_estimator import _horovod


class WorkloadListener(Protocol):
    """What the control hook calls back into (the trial controller)."""

    def on_session_start(self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver) -> None:
        """The training session exists and holds the initial or restored variables."""

    def on_workload_end(
        self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver, batches: int, stopping: str
    ) -> bool:
        """A workload ended after ``batches`` batches; returns whether training must stop.

        ``stopping`` is "" when training goes on, else why it stops: "end", "pause" or
        "request_stop".
        """


class WorkloadControlHook(tf.estimator.SessionRunHook):
    """Pauses the training session every ``scheduling_unit`` batches for the controller.

    Placed last among the training hooks, so that it sees a ``request_stop()`` from
    any other hook in the same step. Between workloads the controller validates and
    checkpoints from ``after_run`` while the session stays open, which avoids
    rebuilding the graph and restoring variables for every workload.

    With several processes, every step also sums a "pause requested" flag over all
    ranks, so that all of them stop after the same batch however the pause reached them.

    Args:
        listener: the controller.
        batches_done: batches this trial had trained before this session.
        max_batches: batches after which training ends.
        scheduling_unit: batches per workload.
        pause_requested: called before every step; True once a pause was asked for.
        loss_source: returns the training loss tensor once the model_fn has built it (or
            None); the loss is fetched every step to report training metrics.
    """

    def __init__(
        self,
        listener: WorkloadListener,
        batches_done: int,
        max_batches: int,
        scheduling_unit: int,
        pause_requested: Callable[[], bool],
        loss_source: Callable[[], Optional[tf.Tensor]] = lambda: None,
    ):
        self._listener = listener
        self.batches = batches_done
        self._max_batches = max_batches
        self._scheduling_unit = scheduling_unit
        self._pause_requested = pause_requested
        self._loss_source = loss_source
        self._loss: Optional[tf.Tensor] = None
        self.workload_losses: list = []

    def begin(self) -> None:
        # The graph is finalized after begin(): anything the hook needs is built now.
        self._saver = tf.compat.v1.train.Saver(max_to_keep=None, save_relative_paths=True)
        self._loss = self._loss_source()
        self._pause_flag = None
        self._local_pause = False
        if _horovod.is_distributed():
            self._pause_flag = tf.compat.v1.placeholder(tf.int32, shape=[], name="det_pause_flag")
            self._any_pause = _horovod.allreduce_sum(self._pause_flag, name="det_pause_requested")

    def after_create_session(self, session: tf.compat.v1.Session, coord) -> None:
        self._listener.on_session_start(session, self._saver)

    def before_run(self, run_context: tf.estimator.SessionRunContext) -> tf.estimator.SessionRunArgs:
        fetches = {"loss": self._loss} if self._loss is not None else {}
        paused = bool(self._pause_requested())
        if self._pause_flag is None:
            self._local_pause = paused
            return tf.estimator.SessionRunArgs(fetches)
        fetches["any_pause"] = self._any_pause
        return tf.estimator.SessionRunArgs(fetches, feed_dict={self._pause_flag: int(paused)})

    def after_run(self, run_context: tf.estimator.SessionRunContext, run_values) -> None:
        self.batches += 1
        results = run_values.results
        if "loss" in results:
            self.workload_losses.append(float(results["loss"]))
        paused = results["any_pause"] > 0 if "any_pause" in results else self._local_pause
        stopping = ""
        if self.batches >= self._max_batches:
            stopping = "end"
        elif paused:
            stopping = "pause"
        elif run_context.stop_requested:
            stopping = "request_stop"
        if stopping or self.batches % self._scheduling_unit == 0:
            must_stop = self._listener.on_workload_end(run_context.session, self._saver, self.batches, stopping)
            self.workload_losses = []
            if stopping or must_stop:
                run_context.request_stop()
