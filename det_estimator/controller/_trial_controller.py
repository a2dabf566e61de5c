"""TrialController: runs one EstimatorTrial in this process, as one rank of the job."""

import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import numpy as np
import tensorflow as tf

from det_estimator import __version__
from det_estimator.checkpoint import TrialCheckpoints, read_checkpoint
from det_estimator.config import ExperimentConfig
from det_estimator.context import DistributedContext, EstimatorTrialContext
from det_estimator.controller._checkpointing import check_serving_names, restore_into, write_checkpoint
from det_estimator.controller._estimator_setup import EXAMPLES_KEY, GraphRecorder, rebuild_estimator
from det_estimator.controller._inputs import training_input_fn, validation_input_fn
from det_estimator.hooks import RunHook
from det_estimator.hooks._workload_control import WorkloadControlHook
from det_estimator.trial import EstimatorTrial

COMPLETED = "COMPLETED"
PAUSED = "PAUSED"


class TrialLifecycleError(RuntimeError):
    """The trial was built or used in a way the harness cannot run."""


class TrialObserver(Protocol):
    """Told of a trial's progress by the chief (rank 0), as it happens; the store is one."""

    def on_start(self, batches_done: int, max_batches: int) -> None:
        """Training starts (or resumes) with ``batches_done`` of ``max_batches`` behind it."""

    def on_training(self, batches: int, metrics: dict[str, float]) -> None:
        """A workload ended after ``batches`` batches; ``metrics`` are averaged over ranks."""

    def on_validation(self, batches: int, metrics: dict[str, Any]) -> None:
        """A validation after ``batches`` batches gave ``metrics``."""

    def on_checkpoint(self, uuid: str, batches: int, path: str, metadata: dict[str, Any]) -> None:
        """A checkpoint was sealed at ``path``."""

    def on_checkpoints_deleted(self, uuids: list[str]) -> None:
        """Retention deleted these checkpoints."""


@dataclass
class TrialOutcome:
    """How a trial run ended."""

    state: str
    batches_trained: int
    training: list[dict[str, Any]] = field(default_factory=list)
    validations: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON-ready data."""
        return {
            "state": self.state,
            "batches_trained": self.batches_trained,
            "training": self.training,
            "validations": self.validations,
            "checkpoints": self.checkpoints,
        }


class TrialController:
    """Trains, validates and checkpoints one trial on this process.

    Every rank of the job runs one controller; rank 0 (the chief) alone writes
    checkpoints. All ranks take the same decisions from the same inputs: batch counts,
    metrics reduced over all ranks, and a pause flag summed over all ranks.

    Args:
        trial_class: the user's ``EstimatorTrial`` subclass.
        config: the validated experiment config.
        checkpoint_dir: where this trial's checkpoints live (shared by all ranks).
        distributed: this process's place in the job.
        test: one training batch, one validation step and one checkpoint.
        pause_requested: returns True once the trial should checkpoint and stop.
        observer: told of progress, validations and checkpoints (on rank 0 only).
        context: the trial's context, when it exists before the trial (the native API
            builds the model with it first); by default a new one.
    """

    def __init__(
        self,
        trial_class: type[EstimatorTrial],
        config: ExperimentConfig,
        checkpoint_dir: str,
        distributed: Optional[DistributedContext] = None,
        test: bool = False,
        pause_requested: Callable[[], bool] = lambda: False,
        observer: Optional[TrialObserver] = None,
        context: Optional[EstimatorTrialContext] = None,
    ):
        if not (isinstance(trial_class, type) and issubclass(trial_class, EstimatorTrial)):
            raise TypeError(f"Argument `trial_class` must be a subclass of EstimatorTrial. Received: {trial_class!r}")
        self._trial_class = trial_class
        self._config = config
        self._store = TrialCheckpoints(checkpoint_dir)
        self._distributed = distributed or DistributedContext()
        self._test = test
        self._pause_requested = pause_requested
        self._observer = observer if self._distributed.rank == 0 else None
        self._given_context = context
        self._seed = config.reproducibility.experiment_seed
        self._hparams = config.sample_hyperparameters(self._seed)
        self._recorder = GraphRecorder()
        self._run_hooks: list[RunHook] = []
        self._outcome = TrialOutcome(state=COMPLETED, batches_trained=0)
        self._best_metric: Optional[float] = None
        self._last_validation = -1
        self._last_checkpoint = -1
        self._improved = False
        self._start_workload(0)

    @property
    def _is_chief(self) -> bool:
        return self._distributed.rank == 0

    def run(self) -> TrialOutcome:
        """Runs the trial to its end (or to a pause) and returns how it ended."""
        seed_everything(self._seed)
        self.context = self._given_context or EstimatorTrialContext(
            self._config, self._hparams, self._seed, self._distributed
        )
        trial = self._trial_class(self.context)
        try:
            user_estimator = trial.build_estimator()
            train_spec, eval_spec = _checked_specs(trial)
            self._serving_fns = trial.build_serving_input_receiver_fns() or {}
            check_serving_names(self._serving_fns)
            self._run_hooks = [hook for hook in train_spec.hooks if isinstance(hook, RunHook)]
            self._eval_spec = eval_spec
            with tempfile.TemporaryDirectory(prefix=f"det-estimator-rank{self._distributed.rank}-") as model_dir:
                self._model_dir = model_dir
                self._estimator = rebuild_estimator(
                    user_estimator, model_dir, self._seed, self._distributed, self._recorder
                )
                self._resume()
                self._max_batches = self._length_in_batches()
                if self._observer:
                    self._observer.on_start(self._batches, self._max_batches)
                if self._batches < self._max_batches:
                    self._train(train_spec)
        finally:
            for hook in self._run_hooks:
                hook.on_trial_close()
        self._outcome.batches_trained = self._batches
        return self._outcome

    def _length_in_batches(self) -> int:
        if self._test:
            return self._batches + 1
        max_length = self._config.searcher.max_length
        return max_length.to_batches(self.context.get_global_batch_size(), self._config.records_per_epoch)

    def _resume(self) -> None:
        self._batches = 0
        path = None
        if self._is_chief:
            self._store.remove_partials()
            latest = self._store.latest_valid()
            self._quarantine_newer_than(latest)
            path = None if latest is None else str(latest.path)
        path = self._distributed.broadcast(path)
        if path is None:
            return
        checkpoint = read_checkpoint(path)
        restore_into(checkpoint, self._model_dir)
        metadata = checkpoint.metadata
        self._batches = self._last_checkpoint = int(metadata["batches_trained"])
        self._best_metric = metadata.get("best_validation_metric")
        _restore_rng(metadata.get("rng_states", []), self._distributed.rank)
        for hook in self._run_hooks:
            hook.on_checkpoint_load(path)
        self._report(f"resumed from checkpoint {checkpoint.uuid} after {self._batches} batches")

    def _quarantine_newer_than(self, latest) -> None:
        """Hides the checkpoints newer than the one resumed from: latest_valid() skipped them as corrupt.

        Left in place, a corrupt checkpoint with more batches would count as the latest
        for retention, which could then delete the valid checkpoints this run writes.
        """
        checkpoints = self._store.list()
        newer = checkpoints[checkpoints.index(latest) + 1 :] if latest is not None else checkpoints
        for checkpoint in newer:
            moved = self._store.quarantine(checkpoint)
            self._report(f"checkpoint {checkpoint.uuid} failed verification; moved to {moved}")

    def _train(self, train_spec: tf.estimator.TrainSpec) -> None:
        hooks = list(train_spec.hooks)
        if self._distributed.size > 1:
            from det_estimator import _horovod

            hooks.append(_horovod.broadcast_variables_hook(0))
        self._control = WorkloadControlHook(
            self,
            batches_done=self._batches,
            max_batches=self._max_batches,
            scheduling_unit=1 if self._test else self._config.scheduling_unit,
            pause_requested=self._pause_requested,
            loss_accumulators=lambda: (self._recorder.loss_sum, self._recorder.loss_batches),
        )
        hooks.append(self._control)  # last, so that it sees any other hook's request_stop()
        self._start_workload(self._batches)
        self._estimator.train(training_input_fn(train_spec.input_fn, self._batches), hooks=hooks)

    # The WorkloadListener interface, called by the control hook from inside the session.

    def on_session_start(self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver) -> None:
        """Checks the trial's use of the wrappers, and validates before training if asked."""
        self._check_wrappers()
        if self._config.perform_initial_validation and self._batches == 0 and not self._test:
            self._validate(self._save_local(session, saver))

    def on_workload_end(
        self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver, batches: int, stopping: str
    ) -> None:
        """Reports the workload, then validates and checkpoints as the config asks."""
        self._batches = batches
        self._report_training(self._control.workload_loss, batches - self._workload_first_batch)
        validate = stopping in ("end", "request_stop") or self._period_elapsed(
            self._config.min_validation_period, self._last_validation
        )
        local_checkpoint = self._save_local(session, saver) if validate else None
        metrics = self._validate(local_checkpoint) if validate else None
        if stopping or self._checkpoint_due(metrics):
            local_checkpoint = local_checkpoint or self._save_local(session, saver)
            self._checkpoint(local_checkpoint, metrics)
        if stopping == "pause":
            self._outcome.state = PAUSED
            self._report(f"paused after {batches} batches; run the trial again to resume")
        self._start_workload(batches)

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

    def _period_elapsed(self, period, since: int) -> bool:
        if period is None:
            return False
        batches = period.to_batches(self.context.get_global_batch_size(), self._config.records_per_epoch)
        return self._batches - max(since, 0) >= batches

    def _checkpoint_due(self, metrics: Optional[dict[str, Any]]) -> bool:
        if self._period_elapsed(self._config.min_checkpoint_period, self._last_checkpoint):
            return True
        policy = self._config.checkpoint_policy
        return metrics is not None and (policy == "all" or (policy == "best" and self._improved))

    def _save_local(self, session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver) -> str:
        """A TF checkpoint of the live session in this process's model_dir, for evaluate and export."""
        prefix = str(Path(self._model_dir) / "model.ckpt")
        return saver.save(session, prefix, global_step=self._batches, write_meta_graph=False)

    def _validate(self, local_checkpoint: str) -> dict[str, Any]:
        spec = self._eval_spec
        raw = self._estimator.evaluate(
            validation_input_fn(spec.input_fn),
            steps=1 if self._test else spec.steps,
            hooks=spec.hooks,
            checkpoint_path=local_checkpoint,
            name=spec.name,
        )
        metrics = self._combine_across_ranks(raw)
        self._last_validation = self._batches
        self._improved = self._is_improvement(metrics)
        self._outcome.validations.append({"batches": self._batches, "metrics": metrics})
        if self._observer:
            self._observer.on_validation(self._batches, metrics)
        shown = "  ".join(f"{key} {_format(value)}" for key, value in sorted(metrics.items()))
        self._report(f"validation after {self._batches} batches: {shown}")
        return metrics

    def _combine_across_ranks(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Per-rank metrics averaged, weighted by the examples each rank evaluated."""
        local = {key: _to_json(value) for key, value in raw.items()}
        examples = int(local.pop(EXAMPLES_KEY))
        per_rank = self._distributed.allgather((examples, local))
        total = sum(count for count, _ in per_rank)
        if total == 0:
            raise TrialLifecycleError("Validation saw no example on any process: check build_validation_spec().")
        combined = {}
        for key, value in local.items():
            if key in self._recorder.global_metric_keys or key == "global_step" or not isinstance(value, float):
                combined[key] = value  # already the same on every rank
            else:
                combined[key] = sum(count * metrics[key] for count, metrics in per_rank if count) / total
        return combined

    def _is_improvement(self, metrics: dict[str, Any]) -> bool:
        searcher = self._config.searcher
        if searcher.metric not in metrics:
            raise TrialLifecycleError(
                f"searcher.metric {searcher.metric!r} is not among the validation metrics: "
                f"{', '.join(sorted(metrics))}. Name one of them in the experiment config."
            )
        value = metrics[searcher.metric]
        best = self._best_metric
        improved = best is None or (value < best if searcher.smaller_is_better else value > best)
        if improved:
            self._best_metric = value
        return improved

    def _checkpoint(self, local_checkpoint: str, metrics: Optional[dict[str, Any]]) -> None:
        rng_states = self._distributed.allgather(_rng_state())
        self._last_checkpoint = self._batches
        if not self._is_chief:
            return
        metadata = {
            "steps_completed": self._batches,
            "batches_trained": self._batches,
            "train_batches_consumed_per_rank": self._batches,
            "trial_seed": self._seed,
            "hparams": self._hparams,
            "config": self._config.to_dict(),
            "rng_states": rng_states,
            "best_validation_metric": self._best_metric,
            "framework": {"det_estimator": __version__, "tensorflow": tf.__version__},
        }
        if metrics is not None:
            metadata["validation_metrics"] = metrics
        checkpoint = write_checkpoint(
            self._store, local_checkpoint, self._estimator, self._serving_fns, self._run_hooks, metadata
        )
        storage = self._config.checkpoint_storage
        deleted = self._store.prune(
            save_latest=max(storage.save_trial_latest, 1),
            save_best=storage.save_trial_best,
            metric=self._config.searcher.metric,
            smaller_is_better=self._config.searcher.smaller_is_better,
        )
        if self._observer:
            self._observer.on_checkpoint(checkpoint.uuid, self._batches, str(checkpoint.path), metadata)
            if deleted:
                self._observer.on_checkpoints_deleted([c.uuid for c in deleted])
        removed = {str(c.path) for c in deleted}
        self._outcome.checkpoints = [c for c in self._outcome.checkpoints if c["path"] not in removed]
        self._outcome.checkpoints.append(
            {"uuid": checkpoint.uuid, "path": str(checkpoint.path), "batches": self._batches}
        )
        self._report(f"checkpoint {checkpoint.uuid} after {self._batches} batches ({len(deleted)} old ones removed)")

    def _start_workload(self, first_batch: int) -> None:
        """Starts timing a workload that begins after ``first_batch`` batches, for the throughput report."""
        self._workload_started = time.monotonic()
        self._workload_first_batch = first_batch

    def _report_training(self, workload_loss: float, workload_batches: int) -> None:
        """Prints progress; records the workload's loss and scalar summaries averaged over all ranks.

        The loss is the workload's mean; a scalar summary is its value at the workload's
        last batch. Estimator's own "loss" summary (last batch only) is left out in favour
        of the mean.
        """
        summaries = {tag: value for tag, value in self._control.workload_summaries.items() if tag != "loss"}
        per_rank = self._distributed.allgather((workload_loss, summaries))
        metrics = {"loss": float(np.mean([loss for loss, _ in per_rank]))}
        for tag in sorted(summaries):
            metrics[tag] = float(np.mean([rank_summaries[tag] for _, rank_summaries in per_rank]))
        self._outcome.training.append({"batches": self._batches, "metrics": metrics})
        if self._observer:
            self._observer.on_training(self._batches, metrics)
        elapsed = max(time.monotonic() - self._workload_started, 1e-9)
        rate = workload_batches / elapsed
        left = (self._max_batches - self._batches) / rate if rate else float("nan")
        shown = "  ".join(f"{tag} {value:.6g}" for tag, value in metrics.items())
        done = self._batches / self._max_batches
        bar = "#" * round(20 * done) + "." * (20 - round(20 * done))
        self._report(
            f"[{bar}] batches {self._batches}/{self._max_batches} ({done:.0%})  "
            f"{shown}  {rate:.1f} batches/s  about {left:.0f} s left"
        )

    def _report(self, message: str) -> None:
        if self._is_chief:
            print(f"[det-estimator] {message}", flush=True)


def _checked_specs(trial: EstimatorTrial):
    train_spec = trial.build_train_spec()
    if not isinstance(train_spec, tf.estimator.TrainSpec):
        raise TypeError(f"build_train_spec() must return a tf.estimator.TrainSpec. Received: {type(train_spec)}")
    eval_spec = trial.build_validation_spec()
    if not isinstance(eval_spec, tf.estimator.EvalSpec):
        raise TypeError(f"build_validation_spec() must return a tf.estimator.EvalSpec. Received: {type(eval_spec)}")
    return train_spec, eval_spec


def seed_everything(seed: int) -> None:
    """Seeds Python's, NumPy's and TensorFlow's global random generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    tf.random.set_seed(seed)


def _rng_state() -> dict[str, Any]:
    version, state, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(state), gauss],
        "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached)],
    }


def _restore_rng(states: list[dict[str, Any]], rank: int) -> None:
    if rank >= len(states):
        return
    version, state, gauss = states[rank]["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, position, has_gauss, cached = states[rank]["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))


def _to_json(value: Any) -> Any:
    array = np.asarray(value)
    if array.ndim == 0:
        return array.item() if array.dtype.kind in "iub" else float(array)
    return array.tolist()


def _format(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
