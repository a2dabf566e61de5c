"""Runs the analytic Keras trial from the command line, for tests that kill or pause a real run.

Usage: run_analytic_keras.py DIRECTORY MAX_BATCHES SLOTS [SECONDS_PER_BATCH [HPARAMS_JSON]]
HPARAMS_JSON may hold ``loader``. Prints ``OUTCOME <json>`` at the end. A pause the trial
asks for at a batch (``pause_at_batch``) is asked of this process, as `experiment pause` asks it
of the command that runs the trial.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import analytic_keras_trial  # noqa: E402

import det_estimator as det  # noqa: E402


def main() -> None:
    directory, max_batches, slots = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    hparams = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    config = analytic_keras_trial.make_config(directory, max_batches, hparams.pop("loader", "numpy"))
    config["hyperparameters"]["seconds_per_batch"] = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    config["hyperparameters"].update(hparams)
    os.environ[analytic_keras_trial.PAUSE_PID] = str(os.getpid())
    outcome = det.run_trial(analytic_keras_trial.AnalyticKerasTrial, config, slots=slots)
    print("OUTCOME " + json.dumps(outcome.to_dict()), flush=True)


if __name__ == "__main__":
    main()
