"""det.init(): the native API, for a script that keeps building its own Estimator."""

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from det_estimator.launcher import SPEC_VARIABLE

# A native config needs no entrypoint: the script is the entrypoint.
NATIVE_ENTRYPOINT = "__main__:NativeTrial"
# Scripts the interpreter reports as sys.argv[0] when there is no script to run again.
_NO_SCRIPT = ("", "-c", "-m")


def init(
    config: Optional[dict[str, Any]] = None,
    local: bool = False,
    test: bool = False,
    context_dir: str = "",
    command: Optional[list[str]] = None,
    master_url: Optional[str] = None,
):
    """Creates a tf.estimator experiment from a script (the native API).

    Call it first in the script; build the Estimator with the returned context's
    wrappers and hand it to ``context.train_and_evaluate(estimator, train_spec,
    eval_spec)``::

        context = det.init(config, local=True)
        optimizer = context.wrap_optimizer(tf.compat.v1.train.AdamOptimizer(context.get_hparam("lr")))
        ...
        context.train_and_evaluate(estimator, train_spec, eval_spec)

    Args:
        config: the experiment config as a dict (``entrypoint`` may be left out).
        local: True trains in this process. False records a tracked experiment in
            the store and runs ``command`` on ``resources.slots_per_trial``
            processes (under horovodrun when more than one), showing its progress;
            this process then exits with the experiment's status.
        test: run the minimal loop: one batch, one validation step, one checkpoint.
        context_dir: the directory the model code runs in (default: the current
            one); it becomes the working directory.
        command: the command line that runs this script again on each process
            (default: ``sys.argv``); required from a notebook or ``python -c``.
        master_url: not supported: det-estimator runs experiments on this machine
            and its Horovod peers, without a remote master.

    Returns:
        An :class:`EstimatorNativeContext`. In a process launched for a tracked
        experiment, the context of that process's rank.

    Raises:
        ValueError: ``master_url`` given; ``context_dir`` not a directory; no
            ``command`` from a notebook.
        ConfigError: the config is invalid.
    """
    if master_url is not None:
        raise ValueError(
            f"det.init(master_url={master_url!r}): det-estimator has no remote master. Use local=True to train "
            "in this process, or local=False to run a tracked experiment on this machine's processes "
            "(resources.slots_per_trial; see the README for several machines)."
        )
    launched = os.environ.get(SPEC_VARIABLE)
    if launched:
        return _context_of_launched_rank(launched)
    if not local:
        command = _command_to_run(command)
    if context_dir:
        if not Path(context_dir).is_dir():
            raise ValueError(f"det.init(context_dir={context_dir!r}): not a directory.")
        os.chdir(context_dir)
    experiment_config = _native_config(config, slots=1 if local else None)
    if local:
        from det_estimator.native._context import EstimatorNativeContext

        run = {"checkpoint_dir": _local_checkpoint_dir(experiment_config), "test": test}
        return _make_context(EstimatorNativeContext, experiment_config, None, run)
    sys.exit(_run_tracked(experiment_config, test, command))


def _native_config(config: Optional[dict[str, Any]], slots: Optional[int]):
    from det_estimator.config import load_experiment_config

    if config is not None and not isinstance(config, dict):
        raise TypeError(f"det.init(config=...) takes a dict. Received: {type(config).__name__}")
    raw = dict(config or {})
    raw.setdefault("entrypoint", NATIVE_ENTRYPOINT)
    if slots is not None:
        # local=True trains in this process only.
        raw["resources"] = {**(raw.get("resources") or {}), "slots_per_trial": slots}
    return load_experiment_config(raw)


def _command_to_run(command: Optional[list[str]]) -> list[str]:
    if command is None:
        if not sys.argv or sys.argv[0] in _NO_SCRIPT or "ipykernel" in sys.argv[0]:
            raise ValueError(
                "det.init(local=False) from a notebook or `python -c` needs `command`: the command line that "
                "runs the training script on each process, e.g. command=['train.py', '--epochs', '3']."
            )
        command = list(sys.argv)
    if not command or not all(isinstance(part, str) for part in command):
        raise ValueError(f"det.init(command=...) takes a non-empty list of strings. Received: {command!r}")
    # The script is found from the context directory the experiment runs in.
    if Path(command[0]).is_file():
        command = [str(Path(command[0]).resolve()), *command[1:]]
    return command


def _local_checkpoint_dir(config) -> str:
    return str(Path(config.checkpoint_storage.checkpoint_directory).resolve() / (config.name or "native"))


def _make_context(context_class: type, config, distributed, run: dict[str, Any]):
    from det_estimator.controller._trial_controller import seed_everything

    seed = config.reproducibility.experiment_seed
    # Seeded now, before the script builds its model, as the controller does for a trial.
    seed_everything(seed)
    return context_class(config, config.sample_hyperparameters(seed), seed, distributed, run)


def _context_of_launched_rank(spec_path: str):
    """The context of one rank of a tracked experiment, from the spec its launcher wrote."""
    from det_estimator import _horovod
    from det_estimator.config import load_experiment_config
    from det_estimator.context import DistributedContext
    from det_estimator.native._context import EstimatorNativeContext

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if not spec.get("native"):
        raise RuntimeError(f"{SPEC_VARIABLE} names a trial spec for det-estimator's own worker, not for det.init().")
    _horovod.init()
    config = load_experiment_config(spec["config"])
    return _make_context(EstimatorNativeContext, config, DistributedContext.from_horovod(), spec)


def _run_tracked(config, test: bool, command: list[str]) -> int:
    """Records the experiment in the store and runs it to its end; returns the exit status."""
    from det_estimator.cli._experiments import record_new_experiment, run_and_follow
    from det_estimator.store import ExperimentStore

    with ExperimentStore() as store:
        experiment_id, trial_id = record_new_experiment(
            store,
            config,
            Path.cwd(),
            name=config.name or Path(command[0]).stem,
            entrypoint=" ".join(command),
            test=test,
            command=command,
        )
        print(f"Created experiment {experiment_id} (trial {trial_id}) in {store.path}", flush=True)
        return run_and_follow(store, experiment_id)
