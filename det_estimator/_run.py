"""run_trial: the Python entry point that runs a trial on one or several processes."""

import contextlib
import importlib
import importlib.util
import json
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.launcher import pause_on_signals

ConfigSource = Union[ExperimentConfig, Mapping[str, Any], str, os.PathLike]


def run_trial(
    trial_class: type,
    config: ConfigSource,
    slots: Optional[int] = None,
    test: bool = False,
    trial_id: Optional[str] = None,
):
    """Runs ``trial_class`` as the experiment config says, on ``slots`` processes.

    Checkpoints go to ``<checkpoint_storage.host_path>/<storage_path>/<trial_id>``; a
    trial run again with the same ``trial_id`` resumes from its latest complete
    checkpoint. SIGTERM or SIGINT pauses the trial: the current batch finishes, a
    checkpoint is written and the run returns with the state ``PAUSED``.

    Args:
        trial_class: the ``EstimatorTrial`` subclass, importable by module name, or
            defined in a script file.
        config: an ``ExperimentConfig``, a dict, or the path of a YAML file.
        slots: processes to run (default: ``resources.slots_per_trial``); more than one
            runs under ``horovodrun --gloo`` on this machine.
        test: one training batch, one validation step and one checkpoint.
        trial_id: names the trial's checkpoint directory (default: the config's
            ``name``, else the trial class's name).

    Returns:
        The ``TrialOutcome``: final state, batches trained, validations and checkpoints.

    Raises:
        ConfigError: the config is invalid.
        RuntimeError: a worker process failed (its traceback was printed).
    """
    config = _with_slots(config if isinstance(config, ExperimentConfig) else load_experiment_config(config), slots)
    trial_id = trial_id or config.name or trial_class.__name__
    checkpoint_dir = str(Path(config.checkpoint_storage.checkpoint_directory) / trial_id)
    return run_trial_in(trial_class, config, checkpoint_dir, test=test)


def run_trial_in(
    trial_class: type,
    config: ExperimentConfig,
    checkpoint_dir: str,
    test: bool = False,
    record: Optional[dict[str, Any]] = None,
    hosts: Optional[str] = None,
):
    """Runs the trial with its checkpoints in ``checkpoint_dir``, on the config's slots.

    ``record`` (``{"store": path, "trial_id": id}``) has the chief record progress in
    an experiment store. ``hosts`` (``"host1:2,host2:2"``) runs the workers on those
    machines, which must see the code, ``checkpoint_dir`` and the store at the same
    paths. SIGTERM or SIGINT to this process pauses the trial, whether it runs here or
    in workers launched from here.
    """
    slots = config.resources.slots_per_trial
    if slots == 1 and hosts is None:
        return run_in_this_process(trial_class, config, checkpoint_dir, test=test, record=record)
    return launch_on_workers(
        {"trial_class": describe_trial_class(trial_class)},
        config,
        checkpoint_dir,
        test=test,
        record=record,
        hosts=hosts,
        failure="The trial failed: a worker exited with status {status} (its traceback is above).",
    )


def launch_on_workers(
    how_to_run: dict[str, Any],
    config: ExperimentConfig,
    checkpoint_dir: str,
    test: bool,
    record: Optional[dict[str, Any]],
    hosts: Optional[str],
    failure: str,
    worker_command: Optional[list[str]] = None,
):
    """Runs a trial on the config's slots under horovodrun; returns its ``TrialOutcome``.

    Args:
        how_to_run: the spec entries that tell the workers what to run:
            ``{"trial_class": ...}`` for det-estimator's worker, ``{"native": True}`` for
            a native-API script, which ``worker_command`` then runs.
        config: the validated experiment config.
        checkpoint_dir: the trial's checkpoint directory.
        test: one training batch, one validation step and one checkpoint.
        record: ``{"store": path, "trial_id": id}``, or None to record nothing.
        hosts: Horovod's host list, or None for this machine.
        failure: the message of the RuntimeError raised when the job fails or ends
            without an outcome; ``{status}`` is replaced by horovodrun's exit status.
        worker_command: what each worker runs; by default det-estimator's worker.
    """
    from det_estimator.controller import TrialOutcome
    from det_estimator.launcher import launch_directory, launch_workers

    # With other hosts, the launch files go beside the checkpoints, on the shared file system.
    with launch_directory(str(Path(checkpoint_dir).parent) if hosts else None) as scratch:
        spec = {
            **how_to_run,
            "config": config.to_dict(),
            "checkpoint_dir": checkpoint_dir,
            "test": test,
            "pause_file": str(scratch / "pause"),
            "outcome_file": str(scratch / "outcome.json"),
            "record": record,
        }
        slots = config.resources.slots_per_trial
        status = launch_workers(spec, scratch / "spec.json", slots, worker_command, hosts)
        outcome_file = Path(spec["outcome_file"])
        if status != 0 or not outcome_file.exists():
            raise RuntimeError(failure.format(status=status))
        return TrialOutcome(**json.loads(outcome_file.read_text(encoding="utf-8")))


def _with_slots(config: ExperimentConfig, slots: Optional[int]) -> ExperimentConfig:
    if slots is None or slots == config.resources.slots_per_trial:
        return config
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"Argument `slots` must be a positive integer. Received: slots={slots!r}")
    raw = config.to_dict()
    raw["resources"]["slots_per_trial"] = slots
    return load_experiment_config(raw)


def run_in_this_process(
    trial_class: type,
    config: ExperimentConfig,
    checkpoint_dir: str,
    distributed=None,
    test: bool = False,
    pause_file: Optional[str] = None,
    record: Optional[dict[str, Any]] = None,
    context=None,
):
    """Runs the controller here, pausing on SIGTERM, SIGINT or the creation of ``pause_file``."""
    from det_estimator.controller import TrialController

    observer = None
    if record is not None and (distributed is None or distributed.rank == 0):
        from det_estimator.store import StoreRecorder

        observer = StoreRecorder(record["store"], record["trial_id"])

    signalled = threading.Event()

    def pause_requested() -> bool:
        return signalled.is_set() or (pause_file is not None and os.path.exists(pause_file))

    controller = TrialController(
        trial_class,
        config,
        checkpoint_dir,
        distributed,
        test=test,
        pause_requested=pause_requested,
        observer=observer,
        context=context,
    )
    in_main_thread = threading.current_thread() is threading.main_thread()
    with pause_on_signals(signalled.set) if in_main_thread else contextlib.nullcontext():
        return controller.run()


def describe_trial_class(trial_class: type) -> dict[str, Optional[str]]:
    """How a worker process finds ``trial_class``: its module, name and source file."""
    module = sys.modules.get(trial_class.__module__)
    source = getattr(module, "__file__", None)
    return {
        "module": trial_class.__module__,
        "qualname": trial_class.__qualname__,
        "file": os.path.abspath(source) if source else None,
        "sys_path": [os.getcwd(), os.path.dirname(os.path.abspath(source))] if source else [os.getcwd()],
    }


def load_trial_class(description: dict[str, Any]) -> type:
    """Imports the class :func:`describe_trial_class` described, in another process."""
    for entry in reversed(description.get("sys_path") or []):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if description["module"] == "__main__":
        # A class defined in the launching script: load that file under another name,
        # so that its `if __name__ == "__main__":` block does not run again.
        spec = importlib.util.spec_from_file_location("det_estimator_trial_module", description["file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(description["module"])
    target: Any = module
    for part in description["qualname"].split("."):
        target = getattr(target, part)
    return target
