"""The run lifecycle: how every run of a trial (or a job) begins, records its error and ends.

Below both ``core`` and ``orchestration``, beside the store: whichever front door
starts a run (``experiment create`` and ``resume``, ``job run``, ``run_trial``,
``det.init()``, ``core.init()``, ``det.keras.init()``, a ``DeterminedCallback``'s
context), one :class:`RunLifecycle` records it:

- :meth:`RunLifecycle.begin` (or ``begin_by_hand``, ``begin_job``) records the run and
  returns the :class:`~det_estimator.ClusterInfo` its processes get;
- :meth:`RunLifecycle.record_error` records a :class:`RunError`, typed by its
  :class:`ErrorKind`;
- :meth:`RunLifecycle.end` decides the run's state from how it ended (an
  :class:`Ending`), and :meth:`RunLifecycle.end_experiment` the experiment's, applying
  checkpoint retention once.

It works on any store with the operations of :class:`RunStore`. Imports no TensorFlow,
and nothing of ``core``, ``orchestration`` or the front ends.
"""

from det_estimator.lifecycle._errors import (
    ErrorKind,
    RunError,
    cause_among_processes,
    is_clean_exit,
    write_process_error,
)
from det_estimator.lifecycle._lifecycle import Ending, RunLifecycle, run_state, trial_class_of
from det_estimator.lifecycle._resume import remove_leftovers, resume_point
from det_estimator.lifecycle._retention import RetentionPolicy, delete_checkpoints_not_kept
from det_estimator.lifecycle._store import RunStore

__all__ = [
    "Ending",
    "ErrorKind",
    "RetentionPolicy",
    "RunError",
    "RunLifecycle",
    "RunStore",
    "cause_among_processes",
    "delete_checkpoints_not_kept",
    "is_clean_exit",
    "remove_leftovers",
    "resume_point",
    "run_state",
    "trial_class_of",
    "write_process_error",
]
