"""EstimatorTrialController: runs one EstimatorTrial on this process, as one rank of the job, on the Core API."""

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator import _heartbeat, core
from det_estimator._process_random_state import python_and_numpy_state, restore_python_and_numpy_state
from det_estimator._trial_controller import TrialController, new_trial_context
from det_estimator._version import __version__
from det_estimator.checkpoint import read_checkpoint
from det_estimator.core._metrics import RankMetrics, combine_across_ranks
from det_estimator.errors import TrialDefinitionError, TrialLifecycleError
from det_estimator.estimator._checkpointing import check_serving_names, restore_into, write_checkpoint_files
from det_estimator.estimator._estimator_setup import EXAMPLES_KEY, GraphRecorder, rebuild_estimator
from det_estimator.estimator._inputs import training_input_fn, validation_input_fn
from det_estimator.estimator._optimizer_graphs import release_other_graphs
from det_estimator.estimator._scratch import scratch_model_dir
from det_estimator.estimator._trial import EstimatorTrial
from det_estimator.estimator._trial_context import EstimatorTrialContext
from det_estimator.hooks import RunHook, _input_state
from det_estimator.hooks._heartbeat_hook import HeartbeatHook
from det_estimator.hooks._workload_control import WorkloadControlHook
from det_estimator.store import State

# EvalSpec's defaults; other values ask for something the harness does not do.
_DEFAULT_THROTTLE_SECS, _DEFAULT_START_DELAY_SECS = 600, 120


@dataclass(frozen=True)
class BuiltTrial:
    """What an ``EstimatorTrial`` builds, checked: everything its controller runs.

    Attributes:
        estimator: the trial's own Estimator (the controller runs a copy with its run configuration).
        train_spec: the training input and hooks.
        eval_spec: the validation input and hooks.
        serving_fns: ``{name: serving_input_receiver_fn}``: one SavedModel per entry in every checkpoint.
    """

    estimator: tf.estimator.Estimator
    train_spec: tf.estimator.TrainSpec
    eval_spec: tf.estimator.EvalSpec
    serving_fns: dict[str, Any]

    @property
    def run_hooks(self) -> list[RunHook]:
        """The ``RunHook``s among the training hooks."""
        return [hook for hook in self.train_spec.hooks if isinstance(hook, RunHook)]

    @classmethod
    def of(cls, trial: EstimatorTrial, context: EstimatorTrialContext) -> "BuiltTrial":
        """Calls the trial's builders and checks what they return.

        Raises:
            TrialDefinitionError: a builder returned something the harness cannot run.
        """
        estimator = trial.build_estimator()
        train_spec, eval_spec = _checked_specs(trial)
        # The native API sets them on its context, as the reference's does.
        native_fns = getattr(context, "serving_input_receiver_fns", None) or {}
        trial_fns = trial.build_serving_input_receiver_fns() or {}
        # Each checked before they are merged, which would fail on a list with a TypeError naming neither.
        check_serving_names(native_fns, source="context.serving_input_receiver_fns must be")
        check_serving_names(trial_fns)
        return cls(estimator, train_spec, eval_spec, {**native_fns, **trial_fns})


def run_estimator_trial(
    trial_class: type, core_context: core.Context, context: Optional[EstimatorTrialContext] = None
) -> State:
    """Builds ``trial_class``'s trial and runs it to its end (or to a pause); returns COMPLETED or PAUSED.

    Seeds the process with the trial's seed, builds the trial and its parts, and runs
    its controller in a scratch model_dir of this process's, removed at the end.

    Args:
        trial_class: the user's ``EstimatorTrial`` subclass.
        core_context: the trial's core context on this process.
        context: the trial's context, when it exists before the trial (the native API
            builds the model with it first); by default a new one.

    Raises:
        TypeError: ``trial_class`` is not an ``EstimatorTrial`` subclass.
    """
    if not (isinstance(trial_class, type) and issubclass(trial_class, EstimatorTrial)):
        raise TypeError(f"Argument `trial_class` must be a subclass of EstimatorTrial. Received: {trial_class!r}")
    context = context or new_trial_context(EstimatorTrialContext, core_context)
    seed_everything(core_context.info.require_trial().trial_seed)
    built = BuiltTrial.of(trial_class(context), context)
    try:
        with scratch_model_dir(core_context.distributed.rank) as model_dir:
            return EstimatorTrialController(core_context, context, built, model_dir).run()
    finally:
        for hook in built.run_hooks:
            hook.on_trial_close()


class EstimatorTrialController(TrialController):
    """Trains, validates and checkpoints one built ``EstimatorTrial`` on this process.

    Every rank of the job runs one controller; rank 0 (the chief) alone writes
    checkpoints. All ranks take the same decisions from the same inputs: batch counts,
    metrics reduced over all ranks, and a pause flag summed over all ranks. Metrics,
    checkpoints, pauses and lengths all go through the trial's core context.

    Training runs in one long-lived ``estimator.train()`` session, driven by a control
    hook placed last among the training hooks, which hands control back after every
    workload (``scheduling_unit`` batches, cut where a period falls due), so that the controller validates (with
    ``estimator.evaluate`` on a checkpoint of the live session) and checkpoints without
    rebuilding the graph. :func:`run_estimator_trial` builds it.

    Args:
        core_context: the trial's core context on this process.
        context: the trial's context.
        built: what the trial built.
        model_dir: this process's scratch model_dir, for the Estimator's own files.
    """

    def __init__(
        self, core_context: core.Context, context: EstimatorTrialContext, built: BuiltTrial, model_dir: str
    ) -> None:
        super().__init__(core_context)
        self.context = context
        self._built = built
        self._run_hooks = built.run_hooks
        self._model_dir = model_dir
        self._recorder = GraphRecorder()
        self._estimator = rebuild_estimator(built.estimator, model_dir, self._seed, self._distributed, self._recorder)
        self._control = WorkloadControlHook(
            self,
            workload_length=self.workload_length,
            pause_requested=self._core.preempt.requested_locally,
            loss_accumulators=lambda: (self._recorder.loss_sum, self._recorder.loss_batches),
        )
        self._restore_input_from: Optional[str] = None
        self._input_saveable = True

    def run(self) -> State:
        """Runs the trial to its end (or to a pause); returns COMPLETED or PAUSED."""
        self._resume()
        max_batches = self._start_operations()
        if max_batches is not None:
            self._train(max_batches)
        return self._state

    def _resume(self) -> None:
        if self._latest_checkpoint is None:
            return
        with self._core.checkpoint.restore_path(self._latest_checkpoint) as path:
            checkpoint = read_checkpoint(path)
            restore_into(path, self._model_dir)
            metadata = checkpoint.metadata
            self._batches = self._last_checkpoint = int(metadata["batches_trained"])
            self._best_metric = metadata.get("best_validation_metric")
            # Checkpoints from before this key validate at the first chance after the resume.
            self._last_validation = int(metadata.get("last_validation_batches", -1))
            saved_input = _input_state.rank_directory(path, self._distributed.rank)
            # Iterator states are per process: they fit only a job of the same size.
            if metadata.get("input_state_ranks") == self._distributed.size and saved_input.is_dir():
                self._restore_input_from = str(saved_input)
            restore_python_and_numpy_state(metadata.get("rng_states", []), self._distributed.rank)
            for hook in self._run_hooks:
                hook.on_checkpoint_load(str(path))

    def _train(self, max_batches: int) -> None:
        train_spec = self._built.train_spec
        hooks = list(train_spec.hooks)
        if self._distributed.size > 1:
            from det_estimator import _horovod

            hooks.append(_horovod.broadcast_variables_hook(0))
        self._control.start(self._batches, max_batches, self._restore_input_from)
        hooks.append(self._control)  # last, so that it sees any other hook's request_stop()
        skip = 0 if self._restore_input_from is not None else self._batches
        self._estimator.train(training_input_fn(train_spec.input_fn, skip), hooks=hooks)

    # The WorkloadListener interface, called by the control hook from inside the session.

    def on_session_start(self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver) -> None:
        """Checks the trial's use of the wrappers, and validates before training if asked."""
        self._check_wrappers()
        if self._config.perform_initial_validation and self._batches == 0 and not self._test:
            self._validate(self._save_local(session, saver))

    def on_batch_end(self, batches: int) -> None:
        """Reports progress (the core context writes it at most once a second)."""
        self._core.train.report_batches(batches)

    def on_workload_end(
        self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver, batches: int, stopping: str
    ) -> bool:
        """Reports the workload, validates and checkpoints as the config asks; returns whether training stops."""
        self._batches = batches
        self._report_training()
        validate = self._validation_due(stopping)
        local_checkpoint: Optional[str] = None
        metrics = None
        if validate:
            local_checkpoint = self._save_local(session, saver)
            metrics = self._validate(local_checkpoint)
        checkpoint_now = bool(stopping) or self._checkpoint_due(metrics)
        if checkpoint_now:
            local_checkpoint = local_checkpoint or self._save_local(session, saver)
            self._checkpoint(session, local_checkpoint, metrics)
        if self._pause_asked_meanwhile(stopping, validate, checkpoint_now):
            stopping = "pause"  # at this batch
            if not checkpoint_now:  # validated, so saved already
                self._checkpoint(session, local_checkpoint or self._save_local(session, saver), metrics)
        if stopping == "end":
            max_batches = self._next_operation()
            if max_batches is None:
                return True
            self._control.max_batches = max_batches
            return False
        if stopping == "pause":
            self._pause()
        return bool(stopping)

    def _check_wrappers(self) -> None:
        if self._distributed.size == 1:
            return
        missing = [
            call
            for call, count in (
                ("context.wrap_optimizer(optimizer)", self.context.wrapped_optimizers),
                ("context.wrap_dataset(dataset)", self.context.wrapped_datasets),
            )
            if count == 0
        ]
        if missing:
            raise TrialLifecycleError(
                f"The trial never called {' or '.join(missing)}. With {self._distributed.size} processes, "
                "wrap the optimizer in build_estimator() so that gradients are averaged across processes, and "
                "wrap each dataset in its input_fn, before batching, so that each process reads its own share."
            )

    def _save_local(self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver) -> str:
        """A TF checkpoint of the live session in this process's model_dir, for evaluate and export."""
        prefix = str(Path(self._model_dir) / "model.ckpt")
        return saver.save(session, prefix, global_step=self._batches, write_meta_graph=False)

    def _validate(self, local_checkpoint: str) -> dict[str, Any]:
        spec = self._built.eval_spec
        steps = 1 if self._test else spec.steps
        _heartbeat.beat()  # building the evaluation's graph takes a while before its first step
        raw = self._estimator.evaluate(
            validation_input_fn(spec.input_fn, steps),
            steps=steps,
            hooks=[*spec.hooks, HeartbeatHook()],
            checkpoint_path=local_checkpoint,
            name=spec.name,
        )
        self._release_evaluation_graphs()
        metrics = self._combine_across_ranks(raw)
        self._record_validation(metrics)
        return metrics

    def _combine_across_ranks(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The evaluation's metrics over every rank's examples, as the core's metric policy combines them.

        ``make_metric`` values are already over every rank (as is the global step, and
        anything that is not a float); ``tf.metrics`` values are weighted by the examples
        each rank evaluated.
        """
        local = {key: _to_json(value) for key, value in raw.items()}
        examples = int(local.pop(EXAMPLES_KEY))
        global_keys = self._recorder.global_metric_keys | {"global_step"}
        mine = RankMetrics(
            examples=examples,
            values={key: value for key, value in local.items() if key not in global_keys and isinstance(value, float)},
            global_values={
                key: value for key, value in local.items() if key in global_keys or not isinstance(value, float)
            },
        )
        combined = combine_across_ranks(mine, self._distributed)
        if combined.examples == 0:
            raise TrialLifecycleError("Validation saw no example on any process: check build_validation_spec().")
        return {key: combined.values[key] for key in local}

    def _checkpoint(self, session: tf.compat.v1.Session, local_checkpoint: str, metrics: Optional[dict[str, Any]]):
        """Writes a checkpoint: the chief's model files and exports, and every process's input position."""
        rng_states = self._distributed.allgather(python_and_numpy_state())
        input_dir = Path(self._model_dir) / _input_state.INPUT_DIR
        saved = self._input_saveable and _input_state.save_input_state(session, self._control.input_saver, input_dir)
        self._input_saveable = all(self._distributed.allgather(saved))
        self._last_checkpoint = self._batches
        metadata = {
            "steps_completed": self._batches,
            "batches_trained": self._batches,
            "train_batches_consumed_per_rank": self._batches,
            "trial_seed": self._seed,
            "hparams": self._hparams,
            "config": self._config.to_dict(),
            "rng_states": rng_states,
            "best_validation_metric": self._best_metric,
            "last_validation_batches": self._last_validation,
            "input_state_ranks": self._distributed.size if self._input_saveable else None,
            "framework": {"det_estimator": __version__, "tensorflow": tf.__version__},
        }
        if metrics is not None:
            metadata["validation_metrics"] = metrics
        with self._core.checkpoint.store_path(metadata, shard=True) as (path, _):
            if self._input_saveable:
                shutil.copytree(input_dir, _input_state.rank_directory(path, self._distributed.rank))
            if self._is_chief:
                write_checkpoint_files(
                    path, local_checkpoint, self._estimator, self._built.serving_fns, self._run_hooks
                )
        self._release_evaluation_graphs()  # the exports' graphs

    def _release_evaluation_graphs(self) -> None:
        """Lets the graphs of evaluations and exports go (see ``release_other_graphs``); training's is the default."""
        training_graph = tf.compat.v1.get_default_graph()
        for optimizer in self.context.optimizers:
            release_other_graphs(optimizer, training_graph)

    def _report_training(self) -> None:
        """Records the workload's loss and scalar summaries, combined over all ranks (or the chief's alone).

        The loss is the workload's mean; a scalar summary is its value at the workload's
        last batch, also when a pause ended the workload early (averaged over the
        processes that fetched it: those that saw the pause at that batch). Estimator's
        own "loss" summary (last batch only) is left out in favour of the mean. With
        ``optimizations.average_training_metrics: false`` the chief reports its own values
        and no collective is made.
        """
        summaries = {tag: value for tag, value in self._control.workload_summaries.items() if tag != "loss"}
        # Every rank trains the workload's batches in step with the others, on batches of one
        # size: each rank's values stand for as many examples. A pause that ended the workload
        # early leaves summaries only with the ranks that saw it at that batch.
        mine = RankMetrics(examples=1, values={"loss": self._control.workload_loss, **summaries})
        across_ranks = self._config.optimizations.average_training_metrics
        combined = combine_across_ranks(mine, self._distributed, across_ranks=across_ranks).values
        metrics = {"loss": combined["loss"], **{tag: combined[tag] for tag in sorted(combined) if tag != "loss"}}
        self._core.train.report_training_metrics(self._batches, metrics)


def _checked_specs(trial: EstimatorTrial) -> tuple[tf.estimator.TrainSpec, tf.estimator.EvalSpec]:
    train_spec = trial.build_train_spec()
    if not isinstance(train_spec, tf.estimator.TrainSpec):
        raise TrialDefinitionError(
            f"build_train_spec() must return a tf.estimator.TrainSpec. Received: {type(train_spec)}"
        )
    eval_spec = trial.build_validation_spec()
    if not isinstance(eval_spec, tf.estimator.EvalSpec):
        raise TrialDefinitionError(
            f"build_validation_spec() must return a tf.estimator.EvalSpec. Received: {type(eval_spec)}"
        )
    _check_eval_spec(eval_spec)
    return train_spec, eval_spec


def _check_eval_spec(eval_spec: tf.estimator.EvalSpec) -> None:
    """Refuses the EvalSpec settings the harness would otherwise silently ignore."""
    if eval_spec.exporters:
        raise TrialDefinitionError(
            "The EvalSpec has exporters, which det-estimator does not run. Return the serving input receiver "
            "functions from build_serving_input_receiver_fns() instead: every checkpoint then holds one SavedModel "
            f"per function. Received: exporters={list(eval_spec.exporters)!r}"
        )
    for name, default, instead in (
        ("throttle_secs", _DEFAULT_THROTTLE_SECS, "min_validation_period"),
        ("start_delay_secs", _DEFAULT_START_DELAY_SECS, "perform_initial_validation / min_validation_period"),
    ):
        value = getattr(eval_spec, name)
        if value != default:
            raise TrialDefinitionError(
                f"EvalSpec({name}={value}) is not used: det-estimator validates on the experiment config's "
                f"{instead}, counted in batches, records or epochs. Leave {name} at its default ({default})."
            )


def seed_everything(seed: int) -> None:
    """Seeds Python's, NumPy's and TensorFlow's global random generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    tf.random.set_seed(seed)


def _to_json(value: Any) -> Any:
    array = np.asarray(value)
    if array.ndim == 0:
        return array.item() if array.dtype.kind in "iub" else float(array)
    return array.tolist()
