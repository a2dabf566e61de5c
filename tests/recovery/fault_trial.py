"""The analytic trial with one fault injected, for the recovery tests.

The ``fault`` hyperparameter says what goes wrong, where and how often::

    {"kind": "raise", "rank": 1, "batch": 7, "once": "/tmp/x/marker"}

- ``raise``: the rank raises at its ``batch``-th batch of the run;
- ``kill_in_training``: the rank SIGKILLs itself at its ``batch``-th batch of the run;
- ``kill_in_evaluation``: the rank SIGKILLs itself at its first evaluation batch of its
  ``evaluation``-th evaluation, while the other ranks go on into the metrics' allgather;
- ``kill_in_checkpoint``: the chief SIGKILLs itself while writing its ``checkpoint``-th
  checkpoint of the run, after the model files and before the checkpoint is sealed;
- ``raise_differently``: the rank raises at its ``batch``-th batch of the run, an error
  of another type in each run (counted in the ``once`` file, which it needs): a failure
  that does not repeat itself, so every restart is worth trying;
- ``raise_at_start``: the trial raises as it is built, before any batch;
- ``throttled_eval_spec``: the trial's EvalSpec sets ``throttle_secs``, which
  det-estimator refuses (a mistake in the trial's code, not a fault of the run).

With ``once`` (a file path) the fault happens only if that file does not exist yet, and
creates it: a restart or a resume then runs clean. Without it the fault happens in every run.
With ``marks`` (a file path) each strike adds its time to that file, a line each.
"""

import json
import os
import signal
import time
from pathlib import Path

import tensorflow as tf
from analytic_trial import AnalyticTrial

import det_estimator as det


def _fault_now(fault: dict) -> bool:
    """Whether the fault fires now: always, or the first time only (its ``once`` marker)."""
    once = fault.get("once")
    if not once:
        return True
    try:
        os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


# The errors ``raise_differently`` raises, one per run.
_DIFFERENT_ERRORS = (RuntimeError, ValueError, OSError, KeyError, LookupError, ArithmeticError)


def _mark(fault: dict) -> None:
    """Adds the time of a strike to the ``marks`` file, when the fault names one."""
    if fault.get("marks"):
        with open(fault["marks"], "a") as marks:
            marks.write(f"{time.time()}\n")


def _strike(fault: dict, rank: int) -> None:
    if fault["kind"] == "raise_differently":
        counter = Path(fault["once"])
        runs = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(runs + 1))
        raise _DIFFERENT_ERRORS[runs % len(_DIFFERENT_ERRORS)](f"injected failure {runs + 1} on rank {rank}")
    if not _fault_now(fault):
        return
    _mark(fault)
    if fault["kind"] == "raise":
        raise RuntimeError(f"injected failure on rank {rank}")
    os.kill(os.getpid(), signal.SIGKILL)


class FaultHook(det.RunHook):
    """Strikes at a batch of training, or while the chief writes a checkpoint."""

    def __init__(self, fault: dict, rank: int, seconds_per_batch: float) -> None:
        self._fault = fault
        self._rank = rank
        self._seconds_per_batch = seconds_per_batch
        self._batches = 0
        self._checkpoints = 0

    def after_run(self, run_context, run_values) -> None:
        self._batches += 1
        if self._seconds_per_batch:
            time.sleep(self._seconds_per_batch)
        kind = self._fault.get("kind")
        here = self._fault.get("rank") == self._rank and self._batches == self._fault.get("batch")
        if kind in ("raise", "raise_differently", "kill_in_training") and here:
            _strike(self._fault, self._rank)

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self._checkpoints += 1
        if self._fault.get("kind") == "kill_in_checkpoint" and self._checkpoints == self._fault.get("checkpoint", 1):
            # Leaves a half-written checkpoint behind, as a process dying mid-write does.
            (Path(checkpoint_dir) / "half_written.bin").write_bytes(b"\0" * 1024)
            _strike(self._fault, self._rank)


class FaultTrial(AnalyticTrial):
    def _fault(self) -> dict:
        return dict(self.context.get_hparams().get("fault") or {})

    def build_estimator(self) -> tf.estimator.Estimator:
        if self._fault().get("kind") == "raise_at_start":
            _mark(self._fault())
            raise RuntimeError("injected failure before the first batch")
        # `record_environment: [NAME, ...]`: each rank writes what those variables are in its process.
        names = self.context.get_hparams().get("record_environment")
        if names:
            rank = self.context.distributed.rank
            events = Path(self.context.get_hparam("events_dir"))
            events.mkdir(parents=True, exist_ok=True)
            seen = {name: os.environ.get(name) for name in names}
            (events / f"environment-rank{rank}.json").write_text(json.dumps(seen))
        return super().build_estimator()

    def build_train_spec(self) -> tf.estimator.TrainSpec:
        spec = super().build_train_spec()
        hook = FaultHook(
            self._fault(),
            self.context.distributed.rank,
            float(self.context.get_hparams().get("fault_seconds_per_batch", 0.0)),
        )
        return spec._replace(hooks=(*spec.hooks, hook))

    def build_validation_spec(self) -> tf.estimator.EvalSpec:
        spec = super().build_validation_spec()
        fault = self._fault()
        if fault.get("kind") == "throttled_eval_spec":
            return spec._replace(throttle_secs=10)
        if fault.get("kind") != "kill_in_evaluation" or fault.get("rank") != self.context.distributed.rank:
            return spec
        counter = {"evaluations": 0}
        rank = self.context.distributed.rank

        def input_fn():
            counter["evaluations"] += 1
            dataset = spec.input_fn()
            if counter["evaluations"] != fault.get("evaluation", 1):
                return dataset

            def strike(x):
                _strike(fault, rank)
                return x

            def killing(features, labels):
                x = tf.compat.v1.py_func(strike, [features["x"]], tf.float32, stateful=True)
                x.set_shape(features["x"].shape)
                return {"x": x}, labels

            return dataset.map(killing)

        return spec._replace(input_fn=input_fn)
