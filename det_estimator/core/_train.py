"""TrainContext: reporting training and validation metrics, and progress, to the experiment store."""

import enum
import json
import logging
import math
import numbers
import time
from pathlib import Path
from typing import Any, Callable, Optional

from det_estimator import _heartbeat
from det_estimator.core._distributed import DistributedContext
from det_estimator.core._store import CoreStore
from det_estimator.errors import PermanentTrialError
from det_estimator.store import StoreRecorder

logger = logging.getLogger("det_estimator.core")

# Progress is written at most this often: a report per batch would cost a write per batch.
_PROGRESS_INTERVAL_SECONDS = 1.0


class EarlyExitReason(enum.Enum):
    """Why a trial ends before its searcher operations are done."""

    INVALID_HP = "INVALID_HP"
    USER_REQUESTED_STOP = "USER_REQUESTED_STOP"


class SearcherMetricError(PermanentTrialError, KeyError):
    """A validation did not report the experiment's ``searcher.metric``, or not as a number."""

    def __str__(self) -> str:
        return str(self.args[0])


class TrainContext:
    """Reports a trial's metrics and progress to the experiment store; ``core_context.train``.

    Only the chief (rank 0) records: on the other processes the reports are accepted
    and ignored, so every process may run the same code. Metrics must be JSON values
    (numbers, strings, lists, dicts); numeric ones also become TensorBoard scalars.

    Args:
        distributed: this process's place in the job.
        recorder: writes to the store (the chief's; None elsewhere or off an experiment).
        searcher_metric: the config's ``searcher.metric``, which every validation must report.
        smaller_is_better: how the searcher metric compares.
        max_batches: returns the trial's length in batches, for progress reports.
        on_validation: told of every validation (the checkpoint context records the
            metrics in the checkpoint of the same step).
        experiment: ``(store, experiment id)``, for reading the experiment's best validation.
        tensorboard_dir: where the trial's TensorBoard event files go.
    """

    def __init__(
        self,
        distributed: DistributedContext,
        recorder: Optional[StoreRecorder],
        searcher_metric: Optional[str] = None,
        smaller_is_better: bool = True,
        max_batches: Callable[[], Optional[int]] = lambda: None,
        on_validation: Callable[[int, dict[str, Any]], None] = lambda steps, metrics: None,
        experiment: Optional[tuple[CoreStore, int]] = None,
        tensorboard_dir: Optional[str] = None,
    ) -> None:
        self._distributed = distributed
        self._recorder = recorder if distributed.rank == 0 else None
        self._searcher_metric = searcher_metric
        self._smaller_is_better = smaller_is_better
        self._max_batches = max_batches
        self._on_validation = on_validation
        self._last_progress = 0.0
        self._pending_batches: Optional[int] = None
        self._experiment = experiment
        self._tensorboard_dir = tensorboard_dir

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: Optional[list[dict[str, Any]]] = None,
    ) -> None:
        """Records the training metrics of the batches up to ``steps_completed``.

        Args:
            steps_completed: batches trained so far, in all.
            metrics: metric name to value, usually averaged over the batches since the
                last report.
            batch_metrics: per-batch values; accepted for compatibility and not recorded.
        """
        metrics = _check_metrics(metrics, "report_training_metrics")
        _heartbeat.beat()
        if self._recorder is not None:
            self._recorder.on_training(int(steps_completed), dict(metrics))
            self._progressed_to(int(steps_completed))

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Records a validation after ``steps_completed`` batches.

        The metrics are also stored in the metadata of the checkpoint written at the same
        step (before or after this call), where checkpoint retention finds them.

        Raises:
            SearcherMetricError: ``metrics`` lacks the config's ``searcher.metric`` (the
                message names the metrics reported, so a misspelt name is easy to fix), or
                its value is not a number (NaN is one).
        """
        metrics = _check_metrics(metrics, "report_validation_metrics")
        _heartbeat.beat()
        if self._searcher_metric is not None and self._searcher_metric not in metrics:
            raise SearcherMetricError(
                f"searcher.metric {self._searcher_metric!r} is not among the validation metrics: "
                f"{', '.join(sorted(metrics)) or 'none'}. Name one of them in the experiment config."
            )
        if self._searcher_metric is not None:
            value = metrics[self._searcher_metric]
            # NaN is a number (the worst); a string or None would leave the search nothing to rank by.
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SearcherMetricError(
                    f"searcher.metric {self._searcher_metric!r} must be a number; the validation reported "
                    f"{value!r} ({type(value).__name__}). Report it as a float, or name a numeric metric "
                    "in the experiment config."
                )
        if self._recorder is not None:
            self._recorder.on_validation(int(steps_completed), dict(metrics))
            self._progressed_to(int(steps_completed))
            self._on_validation(int(steps_completed), dict(metrics))

    def report_progress(self, progress: float) -> None:
        """Records how far the trial is, as a fraction of its length (from 0 to 1).

        Cheap to call often: the store is written at most once a second.
        """
        max_batches = self._max_batches()
        if max_batches:
            self.report_batches(round(min(max(progress, 0.0), 1.0) * max_batches))

    def report_start(self, steps_completed: int, max_steps: Optional[int]) -> None:
        """Records where training (re)starts and how many batches it trains in all.

        The harnesses call it when they start and when the searcher gives a new length;
        the live display then shows ``steps_completed`` of ``max_steps``.
        """
        if self._recorder is not None:
            self._recorder.on_start(int(steps_completed), max_steps)
            self._pending_batches = None
            self._last_progress = time.monotonic()

    def report_target(self, max_steps: Optional[int]) -> None:
        """Records how many batches the trial trains in all now (a new operation of the searcher)."""
        if self._recorder is not None and max_steps is not None:
            store, trial_id = self._recorder.store, self._recorder.trial_id
            store.set_progress(trial_id, store.trial(trial_id).batches_trained, max_steps)

    def report_batches(self, batches: int, force: bool = False) -> None:
        """Records that ``batches`` batches are trained so far (at most once a second unless ``force``).

        A value held back is written by the next report that goes through, or when the
        context closes, so the last one is never lost.
        """
        _heartbeat.beat()  # every process's batches are progress the launcher's hang watch sees
        if self._recorder is None:
            return
        now = time.monotonic()
        if force or now - self._last_progress >= _PROGRESS_INTERVAL_SECONDS:
            self._last_progress = now
            self._pending_batches = None
            self._recorder.on_progress(int(batches))
        else:
            self._pending_batches = int(batches)

    def _progressed_to(self, steps_completed: int) -> None:
        """A report recorded ``steps_completed``: progress held back from before it is stale."""
        self._last_progress = time.monotonic()
        if self._pending_batches is not None and self._pending_batches <= steps_completed:
            self._pending_batches = None

    def flush(self) -> None:
        """Writes the progress held back by the once-a-second limit, if any."""
        if self._pending_batches is not None:
            self.report_batches(self._pending_batches, force=True)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Records why the trial ends early; ``core.init()`` reports ``INVALID_HP`` itself."""
        logger.info("trial exits early: %s", EarlyExitReason(reason).value)

    def get_experiment_best_validation(self) -> Optional[float]:
        """The best value of ``searcher.metric`` over every validation of the experiment so far, or None.

        Any process may call it; it reads the experiment store.
        """
        if self._experiment is None:
            return None
        store, experiment_id = self._experiment
        best = store.best_validation(experiment_id)
        return None if best is None else best.value

    def get_tensorboard_path(self) -> Optional[Path]:
        """The directory of this trial's TensorBoard event files on the chief; None on the other processes.

        Only the chief (rank 0) writes the trial's event files, so only its context
        knows their directory.
        """
        return None if self._tensorboard_dir is None else Path(self._tensorboard_dir)


def _check_metrics(metrics: Any, caller: str) -> dict[str, Any]:
    """The metrics with NumPy scalars as Python numbers, which the store's JSON can hold."""
    if not isinstance(metrics, dict) or not all(isinstance(key, str) for key in metrics):
        raise TypeError(f"{caller}() takes a dict of metric name (str) to value. Received: {metrics!r}")
    plain = {key: plain_number(value) for key, value in metrics.items()}
    for key, value in plain.items():
        # Checked on every process, not only where the chief's store encodes it: a value the
        # store cannot hold fails at the script's own call, naming the metric.
        try:
            json.dumps(value)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"{caller}(): metric {key!r} is a {type(value).__name__}, which the experiment store cannot "
                f"record ({error}). Report numbers, strings, bools, None, or lists and dicts of them "
                f"(a tensor or array as float(value) or value.tolist()). Received: {value!r}"
            ) from None
        if isinstance(value, float) and math.isinf(value):
            logger.warning("metric %r is infinite after %s", key, caller)
    return plain


def plain_number(value: Any) -> Any:
    """A NumPy (or other) int or float scalar as Python's int or float; anything else as it is.

    Scripts often report what NumPy or TensorFlow computed (``loss.numpy()`` is a
    ``numpy.float32``), which JSON cannot encode as it is.
    """
    if isinstance(value, bool) or type(value) in (int, float):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value
