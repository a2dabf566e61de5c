"""det.init(): the native API, for a script that keeps building its own Estimator."""

import os
import sys
import weakref
from pathlib import Path
from typing import Any, Callable, Optional

from det_estimator import _info, orchestration
from det_estimator._run import run_in_this_process
from det_estimator._stack import require_estimator
from det_estimator.checkpoint import check_checkpoint_storage
from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.config._errors import describe
from det_estimator.errors import TrialHyperparameters
from det_estimator.store import ExperimentStore

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
        local: True trains in this process, recorded in the experiment store; run
            again with the same config name and checkpoint storage, it resumes from
            its latest checkpoint. False records a tracked experiment and runs
            ``command`` on ``resources.slots_per_trial`` processes (under horovodrun
            when more than one), showing its progress; this process then exits with
            the experiment's status.
        test: run the minimal loop: one batch, one validation step, one checkpoint, as a
            new experiment that resumes no earlier run and that no later run resumes.
        context_dir: the directory the model code runs in (default: the current
            one); it becomes the working directory.
        command: the command line that runs this script again on each process
            (default: ``sys.argv``); required from a notebook or ``python -c``.
        master_url: not supported: det-estimator runs experiments on this machine
            and its Horovod peers, without a remote master.

    Returns:
        An :class:`~det_estimator.estimator.EstimatorNativeContext`. In a process
        launched for a tracked experiment, the context of that process's rank.

    Raises:
        ValueError: ``master_url`` given; ``context_dir`` not a directory; no
            ``command`` from a notebook.
        ConfigError: the config is invalid.
        EstimatorUnavailableError: TensorFlow has no tf.estimator (2.16 and later).
    """
    if master_url is not None:
        raise ValueError(
            f"det.init(master_url={master_url!r}): det-estimator has no remote master. Use local=True to train "
            "in this process, or local=False to run a tracked experiment on this machine's processes "
            "(resources.slots_per_trial; see the README for several machines)."
        )
    _check_arguments(local, test, context_dir, command)
    # Before anything is recorded or launched: every process of the run would fail the same way.
    require_estimator("det.init() (the native tf.estimator API)")
    launched = _info.get_cluster_info()
    if launched is not None:
        return _context_of_launched_rank(launched)
    # What every slot runs: None to train in this process (local).
    tracked = None if local else _command_to_run(command, context_dir)
    if context_dir:
        if not Path(context_dir).is_dir():
            raise ValueError(f"det.init(context_dir={context_dir!r}): not a directory.")
        os.chdir(context_dir)
    experiment_config = _native_config(config, slots=1 if local else None)
    check_checkpoint_storage(orchestration.checkpoint_storage_root(experiment_config, os.getcwd()).resolve())
    if tracked is None:
        return _local_context(experiment_config, test)
    sys.exit(_run_tracked(experiment_config, test, tracked))


def _check_arguments(local: Any, test: Any, context_dir: Any, command: Any) -> None:
    """Refuses arguments of the wrong kind before anything is recorded or run, naming them."""
    for name, value in (("local", local), ("test", test)):
        if not isinstance(value, bool):
            raise TypeError(f"det.init({name}=...) takes True or False. Received: {describe(value)}")
    if not isinstance(context_dir, (str, os.PathLike)):
        raise TypeError(
            f"det.init(context_dir=...) takes the path of a directory (a str or path-like). Received: "
            f"{describe(context_dir)}"
        )
    if command is not None and not isinstance(command, (list, tuple)):
        hint = f" (e.g. {command.split()!r})" if isinstance(command, str) else ""
        raise TypeError(
            f"det.init(command=...) takes the command line as a list of strings{hint}, or None. "
            f"Received: {describe(command)}"
        )


def _native_config(config: Optional[dict[str, Any]], slots: Optional[int]) -> ExperimentConfig:
    if config is not None and not isinstance(config, dict):
        raise TypeError(f"det.init(config=...) takes a dict. Received: {type(config).__name__}")
    raw = dict(config or {})
    raw.setdefault("entrypoint", NATIVE_ENTRYPOINT)
    if slots is not None:
        # local=True trains in this process only.
        raw["resources"] = {**(raw.get("resources") or {}), "slots_per_trial": slots}
    return load_experiment_config(raw)


def _command_to_run(command: Optional[list[str]], context_dir: str = "") -> list[str]:
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
    if context_dir and Path(context_dir).resolve() != Path.cwd().resolve():
        # So are the files its arguments name (``--config runs/exp.yaml``), which this
        # process read from its own working directory: they must name the same files there.
        command = [command[0], *map(_absolute_if_a_path_here, command[1:])]
    return ["python3", *command]


def _absolute_if_a_path_here(argument: str) -> str:
    """``argument`` (or the value of ``--name=value``) made absolute if it is a relative path that exists here."""
    prefix, value = "", argument
    if argument.startswith("-"):
        if "=" not in argument:
            return argument
        name, value = argument.split("=", 1)
        prefix = f"{name}="
    if value and not os.path.isabs(value) and os.path.exists(value):
        return prefix + os.path.abspath(value)
    return argument


def _context(
    config: ExperimentConfig,
    hparams: dict[str, Any],
    seed: int,
    trial_id: int,
    experiment_id: int,
    distributed: Any,
    run: Callable,
):
    from det_estimator.estimator import EstimatorNativeContext
    from det_estimator.estimator._controller import seed_everything

    # Seeded now, before the script builds its model, as the controller does for a trial.
    seed_everything(seed)
    return EstimatorNativeContext(config, hparams, seed, distributed, run, trial_id, experiment_id)


def _local_context(config: ExperimentConfig, test: bool):
    """A context whose train_and_evaluate runs the trial in this process, recorded in the default store."""
    from det_estimator import core

    context_dir = os.getcwd()
    root = orchestration.checkpoint_storage_root(config, context_dir)
    run_key = f"native:{root.resolve() / (config.name or 'native')}"
    # One client records the experiment now and its run when the script trains; it lives as
    # long as the context, which a script may train more than once.
    store = ExperimentStore()
    try:
        experiment_id = orchestration.find_or_record_experiment(store, run_key, config, context_dir, test=test)
        trial = store.trials(experiment_id)[0]
    except BaseException:
        store.close()
        raise

    def run(train: Callable[[core.Context], Any]) -> orchestration.TrialOutcome:
        # The run itself begins here, in the lifecycle, when the script trains.
        return run_in_this_process(store, experiment_id, train)

    hparams = TrialHyperparameters(trial.hparams)
    context = _context(config, hparams, trial.seed, trial.id, experiment_id, None, run)
    weakref.finalize(context, store.close)
    return context


def _context_of_launched_rank(info: _info.ClusterInfo):
    """The context of one rank of a tracked experiment, from the info its launcher wrote."""
    from det_estimator import core

    if info.trial_class is not None:
        raise RuntimeError(
            "det.init() was called in a process launched for a trial class; it is for scripts whose experiment "
            "runs the script itself."
        )
    import tensorflow as tf

    # As for an EstimatorTrial in a worker process: the reference system's TF1 behaviour.
    tf.compat.v1.disable_v2_behavior()
    distributed: core.DistributedContext = core.DummyDistributedContext()
    if info.slots > 1:
        from det_estimator import _horovod

        distributed = core.DistributedContext.from_horovod(_horovod.init())
    trial = info.require_trial()
    config = load_experiment_config(trial.config)

    def run(train: Callable[[core.Context], Any]) -> orchestration.TrialOutcome:
        with ExperimentStore(info.store_path) as store:
            with core.build_context(info, distributed, config=config, store=store) as core_context:
                train(core_context)
            return orchestration.trial_outcome(store, trial.trial_id, trial.run_id)

    return _context(config, trial.hparams, trial.trial_seed, trial.trial_id, trial.experiment_id, distributed, run)


def _run_tracked(config: ExperimentConfig, test: bool, command: list[str]) -> int:
    """Records the experiment in the store and runs it to its end; returns the exit status."""
    with ExperimentStore() as store:
        experiment_id = orchestration.record_experiment(
            store, config, os.getcwd(), name=config.name or Path(command[1]).stem, test=test, command=command
        )
        trial_id = store.trials(experiment_id)[0].id
        print(f"Created experiment {experiment_id} (trial {trial_id}) in {store.location}", flush=True)
        return orchestration.run_and_report(store, experiment_id, config=config)
