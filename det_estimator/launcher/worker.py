"""One worker process of a trial: ``python -m det_estimator.launcher.worker`` under horovodrun.

Reads the trial spec named by ``DET_TRIAL_SPEC``, initializes Horovod and runs the
trial controller. An exception ends the process with its traceback and a non-zero
status, upon which horovodrun ends the other workers.
"""

import json
import os
import sys

from det_estimator.launcher._launch import SPEC_VARIABLE


def main() -> int:
    """Runs this worker's share of the trial; returns the exit status."""
    spec_path = os.environ.get(SPEC_VARIABLE)
    if not spec_path:
        print(f"{SPEC_VARIABLE} is not set: this module is started by det_estimator's launcher.", file=sys.stderr)
        return 2
    with open(spec_path, encoding="utf-8") as spec_file:
        spec = json.load(spec_file)

    from det_estimator import _horovod
    from det_estimator._run import load_trial_class, run_in_this_process
    from det_estimator.config import load_experiment_config
    from det_estimator.context import DistributedContext

    _horovod.init()
    outcome = run_in_this_process(
        load_trial_class(spec["trial_class"]),
        load_experiment_config(spec["config"]),
        spec["checkpoint_dir"],
        DistributedContext.from_horovod(),
        test=spec["test"],
        pause_file=spec["pause_file"],
        record=spec.get("record"),
    )
    if _horovod.rank() == 0:
        with open(spec["outcome_file"], "w", encoding="utf-8") as outcome_file:
            json.dump(outcome.to_dict(), outcome_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
