"""``det.keras.init()``: the new Keras API's entry point, on the Core API."""

import atexit
import logging
import numbers
import os
import sys
from typing import Any, Optional, Union

import tensorflow as tf

from det_estimator import _horovod, _info, core
from det_estimator.config._errors import describe
from det_estimator.config._source import read_source
from det_estimator.core._distributed import tf_config_workers
from det_estimator.errors import TrialHyperparameters, UndefinedHyperparameterError
from det_estimator.keras._api._context import KerasContext, Optimizations, TrainingContext
from det_estimator.keras._devices import pin_local_gpu
from det_estimator.keras._engine import _random_states
from det_estimator.store import BATCH_INFERENCE, ExperimentStore

logger = logging.getLogger("det_estimator.keras")

# The seed of a script run by hand that names none: two runs by hand give the same result.
DEFAULT_SEED = 0


def init(
    *,
    seed: Optional[int] = None,
    config: Union[dict[str, Any], str, os.PathLike, None] = None,
    checkpoint_storage: Optional[Union[str, os.PathLike]] = None,
) -> KerasContext:
    """Starts the new Keras API: seeds Python, NumPy and TensorFlow, and returns the :class:`KerasContext`.

    Call it first in the training (or batch-inference) script. It knows how the script
    was started:

    - **By an experiment** (``det-estimator experiment create`` of a config whose
      ``entrypoint_script`` is ``python3 train.py``, on one slot or several): the
      context is the trial's; the seed is the trial's seed, the hyperparameters are
      the trial's, and :meth:`KerasContext.fit` trains as the searcher says,
      checkpoints, pauses and resumes. Several slots run under Horovod, or, where it
      is missing, under the TensorFlow launcher: every process is then a worker of a
      ``MultiWorkerMirroredStrategy`` (``TF_CONFIG``), which ``init()`` makes the
      script's strategy, so that the model and optimizer built after it are the
      strategy's, and the strategy averages the gradients.
    - **By a job** (``det-estimator job run``): ``context.config_data`` is the job
      config's ``data``; there is no ``context.training``.
    - **By hand** (``python3 train.py``): the run is recorded as a new experiment of one
      trial in the default store (``DET_ESTIMATOR_STORE``, created if missing), seeded
      with ``seed`` (default: the config's ``reproducibility.experiment_seed``, else 0),
      which is recorded as the trial's seed, with the hyperparameters of ``config`` if given; ``fit``
      honours ``epochs`` and ``initial_epoch``, as ``model.fit`` does.

    The run ends, and is recorded as completed, paused or failed, when the script exits
    (or at :meth:`KerasContext.close`).

    Args:
        seed: the seed of a run by hand (default: the config's ``experiment_seed``, else 0)
            or of a job (default 0); a launched trial uses its own.
        config: the experiment config (a dict, or the path of a YAML file) to record a
            run by hand with (``hyperparameters``, ``data``, ...); ignored when launched.
        checkpoint_storage: where a run by hand writes checkpoints (default: the
            config's, else ``checkpoints`` in the current directory).

    Returns:
        The context.
    """
    _check_arguments(seed, checkpoint_storage)
    info = _info.get_cluster_info()
    if _horovod_size() > 1:
        hvd = _horovod.init()
        pin_local_gpu(hvd.local_rank())  # one GPU per process, before any TensorFlow work
    if info is not None and info.task_type == BATCH_INFERENCE:
        context = _job_context(info, seed)
    else:
        context = _trial_context(info, seed, config, checkpoint_storage, _join_tf_config_workers())
    _close_at_exit(context)
    return context


def _check_arguments(seed: Any, checkpoint_storage: Any) -> None:
    """Refuses a ``seed`` or ``checkpoint_storage`` of the wrong kind before anything is recorded, naming it."""
    # A run by hand is recorded with its seed as the experiment's seed, which is below 2**31.
    if seed is not None:
        rule = f"det.keras.init(seed=...) takes an integer from 0 to 2**31 - 1, or None. Received: {describe(seed)}"
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(rule)
        if not 0 <= seed < 2**31:
            raise ValueError(rule)
    if checkpoint_storage is not None and not isinstance(checkpoint_storage, (str, os.PathLike)):
        raise TypeError(
            "det.keras.init(checkpoint_storage=...) takes the path of a directory (a str or path-like) or None. "
            f"Received: {describe(checkpoint_storage)}"
        )


def _trial_context(
    info: Optional[_info.ClusterInfo],
    seed: Optional[int],
    config: Union[dict[str, Any], str, os.PathLike, None],
    checkpoint_storage: Optional[Union[str, os.PathLike]],
    distributed: Optional[core.DistributedContext],
) -> KerasContext:
    launched = info is not None
    by_hand_without_config = not launched and config is None
    # A launched trial has its experiment's config; the one given here is for a run by hand.
    recorded_config = None if launched else _by_hand_config(config, seed)
    core_context = core.init(
        distributed=distributed, config=recorded_config, checkpoint_storage=checkpoint_storage
    ).start()
    run_info = core_context.info
    trial = run_info.require_trial()
    if launched and seed is not None and seed != trial.trial_seed:
        logger.info("det.keras.init(seed=%d) is ignored in an experiment: the trial's seed is used", seed)
    # By hand too, the seed recorded: `experiment resume` of a run by hand then seeds as it did.
    seed = trial.trial_seed
    # Layers built from now on draw their randomness (dropout, noise) from tf.random.Generator
    # objects, whose states DeterminedCallback checkpoints: a resumed trial draws the masks an
    # uninterrupted one would. A run by hand too: paused by Ctrl-C, `experiment resume` runs
    # it again as a trial from its checkpoint, which must hold the states of its draws.
    _random_states.use_generators_in_layers()
    _seed_everything(seed)
    experiment_config = core_context.config
    optimizations = experiment_config.optimizations
    training = TrainingContext(
        hparams=_hyperparameters(trial.hparams, by_hand_without_config=by_hand_without_config),
        trial_id=trial.trial_id,
        experiment_id=trial.experiment_id,
        seed=seed,
        core=core_context,
        launched=launched,
        latest_checkpoint=run_info.latest_checkpoint if launched else None,
        test_mode=run_info.test_mode,
        searcher_metric=experiment_config.searcher.metric,
    )
    return KerasContext(
        core_context.distributed,
        training,
        dict(run_info.user_data),
        seed,
        Optimizations(
            aggregation_frequency=optimizations.aggregation_frequency,
            average_aggregated_gradients=optimizations.average_aggregated_gradients,
            gradient_compression=optimizations.gradient_compression,
        ),
        core_context.store,
        run_info.task_type,
    )


def _by_hand_config(config: Union[dict[str, Any], str, os.PathLike, None], seed: Optional[int]) -> dict[str, Any]:
    """The config a run by hand is recorded with: the user's, with the seed the run uses.

    That seed is ``seed`` if given, else the config's ``reproducibility.experiment_seed``,
    else :data:`DEFAULT_SEED`. The run records the command that started it as its
    entrypoint, so the config's ``entrypoint_script`` is left out.
    """
    recorded = {} if config is None else {k: v for k, v in read_source(config).items() if k != "entrypoint_script"}
    reproducibility = recorded.get("reproducibility") or {}
    if isinstance(reproducibility, dict):  # anything else is left for the config's own checks to word
        if seed is not None:
            reproducibility = {**reproducibility, "experiment_seed": seed}
        recorded["reproducibility"] = {"experiment_seed": DEFAULT_SEED, **reproducibility}
    return recorded


class _NoConfigHyperparameters(TrialHyperparameters):
    """The hyperparameters of a run by hand started without a config: none, and the fix when a script reads one."""

    def __missing__(self, name: str):
        raise UndefinedHyperparameterError(
            f"Hyperparameter {name!r} is not defined: this run by hand has no experiment config. Pass the config "
            "that defines it: det.keras.init(config='const.yaml') (a path, or a dict with a `hyperparameters` "
            "section)."
        )


def _hyperparameters(hparams: dict[str, Any], by_hand_without_config: bool) -> TrialHyperparameters:
    """``context.training.hparams``: a dict whose missing names raise, saying where they should come from."""
    return _NoConfigHyperparameters(hparams) if by_hand_without_config else TrialHyperparameters(hparams)


def _job_context(info: _info.ClusterInfo, seed: Optional[int]) -> KerasContext:
    distributed = core.DistributedContext.from_environment() if info.slots > 1 else core.DummyDistributedContext()
    seed = DEFAULT_SEED if seed is None else seed
    _seed_everything(seed)
    # A job trains nothing, so it has no core context: its own client is opened here, once.
    store = ExperimentStore(info.store_path)
    return KerasContext(
        distributed, None, dict(info.user_data), seed, Optimizations(), store, info.task_type, owns_store=True
    )


def _seed_everything(seed: int) -> None:
    """Python's ``random``, NumPy's global generator and TensorFlow's, as Keras does it."""
    tf.keras.utils.set_random_seed(int(seed))


def _horovod_size() -> int:
    return int(os.environ.get("HOROVOD_SIZE", "1"))


def _join_tf_config_workers() -> Optional[core.DistributedContext]:
    """Under the TensorFlow launcher on several slots: this process's place, its strategy made the script's.

    Every process is a worker of the ``MultiWorkerMirroredStrategy`` of its ``TF_CONFIG``
    (made before any other TensorFlow work, as TensorFlow requires). The strategy is set
    as the script's own, as the worker of a ``TFKerasTrial`` enters its scope for the
    whole trial: the model and optimizer the script builds after ``init()`` are then
    the strategy's, and the strategy averages the gradients. None elsewhere (one
    process, or Horovod's processes, which need no strategy).
    """
    if _horovod_size() > 1 or tf_config_workers() < 2:
        return None
    distributed, strategy = core.DistributedContext.from_tf_config()
    tf.distribute.experimental_set_strategy(strategy)
    return distributed


def _close_at_exit(context: KerasContext) -> None:
    """Ends the run when the script ends: failed if it raised, else completed or paused."""
    previous = sys.excepthook

    def record_failure(exc_type: type, exc: BaseException, tb: Any) -> None:
        previous(exc_type, exc, tb)
        context._end(exc)

    sys.excepthook = record_failure
    atexit.register(context._end, None)
