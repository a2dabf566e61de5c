"""Runs the trial of an experiment recorded in the store, in a process of its own.

``experiment create`` and ``experiment resume`` start ``python -m
det_estimator.cli._runner STORE EXPERIMENT_ID`` and follow its output; this process
is the one ``experiment pause`` signals (it runs the trial, or launches its workers).
The experiment's state in the store always ends COMPLETED, PAUSED or ERROR.
"""

import importlib
import os
import sys
import traceback

from det_estimator import store as experiment_store


def main(argv: list[str]) -> int:
    """Runs the experiment; returns 0 when it completed or paused, 1 when it failed."""
    store_path, experiment_id = argv[0], int(argv[1])
    store = experiment_store.ExperimentStore(store_path)
    experiment = store.experiment(experiment_id)
    trial = experiment["trials"][0]
    try:
        from det_estimator._run import run_trial_in
        from det_estimator.config import load_experiment_config

        os.chdir(experiment["context_dir"])
        sys.path.insert(0, experiment["context_dir"])
        config = load_experiment_config(experiment["config"])
        trial_class = _import_entrypoint(config.entrypoint_module, config.entrypoint_class)
        outcome = run_trial_in(
            trial_class,
            config,
            trial["checkpoint_dir"],
            test=experiment["test"],
            record={"store": store_path, "trial_id": trial["id"]},
            on_launch=lambda pid: store.set_launcher(experiment_id, pid),
        )
    except BaseException:
        traceback.print_exc()
        store.set_state(experiment_id, experiment_store.ERROR)
        return 1
    store.set_state(experiment_id, outcome.state)
    return 0


def _import_entrypoint(module_name: str, class_name: str) -> type:
    module = importlib.import_module(module_name)
    trial_class = getattr(module, class_name, None)
    if trial_class is None:
        raise AttributeError(
            f"The entrypoint's module {module_name} ({module.__file__}) has no {class_name}: "
            "check the config's `entrypoint: module:TrialClass`."
        )
    return trial_class


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
