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
from typing import TYPE_CHECKING, Any

from det_estimator import store as experiment_store

if TYPE_CHECKING:
    from det_estimator.config import ExperimentConfig


def main(argv: list[str]) -> int:
    """Runs the experiment; returns 0 when it completed or paused, 1 when it failed."""
    store_path, experiment_id = argv[0], int(argv[1])
    store = experiment_store.ExperimentStore(store_path)
    store_path = str(store.path)  # absolute: the workers run in the context directory
    experiment = store.experiment(experiment_id)
    trial = experiment["trials"][0]
    try:
        from det_estimator._run import run_trial_in
        from det_estimator.config import load_experiment_config

        os.chdir(experiment["context_dir"])
        sys.path.insert(0, experiment["context_dir"])
        config = load_experiment_config(experiment["config"])
        record = {"store": store_path, "trial_id": trial["id"]}
        store.set_launcher(experiment_id, os.getpid())
        if experiment["command"] is not None:
            state = _run_native_script(experiment, config, trial["checkpoint_dir"], record)
        else:
            trial_class = _import_entrypoint(config.entrypoint_module, config.entrypoint_class)
            outcome = run_trial_in(
                trial_class,
                config,
                trial["checkpoint_dir"],
                test=experiment["test"],
                record=record,
                hosts=experiment["hosts"],
            )
            state = outcome.state
    except BaseException:
        traceback.print_exc()
        store.set_state(experiment_id, experiment_store.ERROR)
        return 1
    store.set_state(experiment_id, state)
    return 0


def _run_native_script(
    experiment: dict[str, Any], config: "ExperimentConfig", checkpoint_dir: str, record: dict[str, Any]
) -> str:
    """Runs a native-API script on the config's slots; returns the state it ended in.

    Each process runs the experiment's command with Python; ``det.init()`` finds the
    run's spec in its environment and trains as one rank instead of creating another
    experiment.
    """
    from det_estimator._run import launch_on_workers

    command = experiment["command"]
    outcome = launch_on_workers(
        {"native": True},
        config,
        checkpoint_dir,
        test=experiment["test"],
        record=record,
        hosts=experiment["hosts"],
        failure=f"The script {' '.join(command)} failed (exit status {{status}}) or never called "
        "context.train_and_evaluate(); its output is above.",
        worker_command=[sys.executable, *command],
    )
    return outcome.state


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
