"""One launched process of a trial: ``python -m det_estimator.worker`` (several slots: horovodrun, or TF_CONFIG).

Reads the run's info named by ``DET_CLUSTER_INFO``, joins the job, and runs the trial
class with the controller of its type. An exception is recorded in the store as the
run's error (with this process's rank) and ends the process with a non-zero status,
upon which horovodrun ends the others.
"""

import contextlib
import os
import sys
from contextlib import AbstractContextManager
from typing import Any

from det_estimator import _environment_variables as environment_variables
from det_estimator import _info


def main() -> int:
    """Runs this process's share of the trial; returns the exit status."""
    info = _info.get_cluster_info()
    if info is None or info.trial_class is None:
        print(
            f"{environment_variables.CLUSTER_INFO} is not set or names no trial class: this module is started by "
            "det-estimator's launcher.",
            file=sys.stderr,
        )
        return 2
    from det_estimator import core
    from det_estimator.errors import InvalidHP
    from det_estimator.lifecycle import RunError, RunLifecycle
    from det_estimator.store import ExperimentStore
    from det_estimator.worker._run import run_trial_class

    rank = 0
    # The one client of the store in this process: the core context records through it.
    with ExperimentStore(info.store_path) as store:
        lifecycle = RunLifecycle(store)
        run_id = info.require_trial().run_id
        try:
            distributed, strategy = _join_job(info)
            rank = distributed.rank
            trial_class = info.trial_class.load()
            _disable_v2_behavior_for_estimators(trial_class)
            # Under TF_CONFIG the trial builds its model in the strategy's scope, and fit runs there.
            with core.build_context(info, distributed, store=store) as core_context, strategy:
                run_trial_class(trial_class, core_context)
        except InvalidHP as error:
            # Not a failure: the search replaces the trial. Recorded for the launcher to see.
            lifecycle.record_error(run_id, RunError.of(error, rank))
            print(f"The trial's hyperparameters are invalid (InvalidHP): {error}", file=sys.stderr)
            return 0
        except BaseException as error:
            lifecycle.record_error(run_id, RunError.of(error, rank))
            raise
    return 0


def _join_job(info: _info.ClusterInfo) -> tuple[Any, AbstractContextManager[Any]]:
    """This process's DistributedContext, and the scope the trial runs in.

    On several slots: the workers of a ``MultiWorkerMirroredStrategy`` under the
    TensorFlow launcher (``TF_CONFIG``), which averages the gradients, its scope
    entered for the whole trial; otherwise Horovod's ranks (for the gradients too).
    """
    from det_estimator import core

    if info.slots == 1:
        return core.DummyDistributedContext(), contextlib.nullcontext()
    if os.environ.get("TF_CONFIG"):
        distributed, strategy = core.DistributedContext.from_tf_config()
        return distributed, strategy.scope()
    from det_estimator import _horovod

    return core.DistributedContext.from_horovod(_horovod.init()), contextlib.nullcontext()


def _disable_v2_behavior_for_estimators(trial_class: type) -> None:
    """EstimatorTrial code runs with TensorFlow's V2 behaviour disabled, as in the reference system."""
    from det_estimator._stack import has_estimator

    if not has_estimator():
        return  # no EstimatorTrial without tf.estimator: the trial is of another type
    from det_estimator.estimator import EstimatorTrial

    if isinstance(trial_class, type) and issubclass(trial_class, EstimatorTrial):
        import tensorflow as tf

        tf.compat.v1.disable_v2_behavior()


if __name__ == "__main__":
    sys.exit(main())
