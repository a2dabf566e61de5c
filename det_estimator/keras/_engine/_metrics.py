"""Keras metrics over every process's data: the Keras side of the core's cross-rank metric policy.

On N processes each one's ``model.fit`` and ``model.evaluate`` see only its share of the
data, so the values Keras computes are that share's. This module hands a model's metrics
to :func:`det_estimator.core._metrics.combine_across_ranks`, sorted as the policy wants:

- a Keras metric's state variables are sums (``total`` and ``count`` of a mean, the
  confusion counts of ``AUC``, ``Precision``, ...): they are summed across processes and
  the metric is read from the sum, which is the exact value of all the data together,
  weighted by the examples (or sample weights) each process saw;
- a metric without state variables computes its own value: ``ReducerMetric`` exchanges
  its reducer's state with the other processes itself, so its value passes through;
- a plain number in the logs that no metric produced (a custom ``train_step``'s extra
  output) is weighted by the examples its process saw.

Under a ``tf.distribute`` strategy whose replicas span the processes
(``MultiWorkerMirroredStrategy``), Keras' metric variables are already summed over the
workers when read, so the values pass through as they are.

A metric of your own whose state is not a sum (a maximum, a last value) would be
combined wrongly; keep such metrics out of distributed runs or make their state additive.
"""

import numbers
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator import _heartbeat
from det_estimator.core import DistributedContext
from det_estimator.core._metrics import CombinedMetrics, RankMetrics, combine_across_ranks
from det_estimator.keras._engine._keras_compat import strategy_spans_processes

VALIDATION_PREFIX = "val_"


def global_metrics(
    model: tf.keras.Model,
    distributed: DistributedContext,
    logs: Optional[Mapping[str, Any]] = None,
    examples: Optional[int] = None,
    *,
    across_ranks: bool = True,
) -> dict[str, Any]:
    """The model's metric values over every process's data (a collective: every process calls it).

    The model's metrics keep this process's states: the sums are read, then put back.

    Args:
        model: the compiled model whose metrics hold this process's states.
        distributed: this process's place in the job.
        logs: the logs Keras gave with these states; entries that no metric produced are
            combined as plain numbers.
        examples: the examples this process's states stand for; by default the count
            of the model's loss metric (each process counts the same when there is none).
        across_ranks: False for this process's values alone (no collective).

    Returns:
        Metric name to value, as ``model.evaluate(..., return_dict=True)`` names them,
        followed by the other entries of ``logs``.
    """
    if distributed.size == 1 or not across_ranks or strategy_spans_processes(model):
        return {**_results(model.metrics), **_other_logs(model, logs)}
    mine = local_metrics(model, logs, examples)
    return read_combined(model, combine_across_ranks(mine, distributed))


def local_metrics(model: tf.keras.Model, logs: Optional[Mapping[str, Any]] = None, examples: Optional[int] = None):
    """This process's metrics of ``model``, sorted as the core's policy combines them.

    Returns:
        A :class:`~det_estimator.core._metrics.RankMetrics`.
    """
    states, global_values = {}, {}
    for metric in model.metrics:
        if metric.variables:
            states[metric.name] = [variable.numpy() for variable in metric.variables]
        else:
            global_values.update(_results([metric]))
    values, passed = {}, {}
    for name, value in _other_logs(model, logs).items():
        if isinstance(value, float):
            values[name] = value
        else:
            passed[name] = value
    return RankMetrics(
        examples=_examples_seen(model) if examples is None else int(examples),
        values=values,
        global_values={**passed, **global_values},
        states=states,
    )


def read_combined(model: tf.keras.Model, combined: CombinedMetrics) -> dict[str, Any]:
    """The values of ``model``'s metrics from the summed states in ``combined``, in the model's order.

    Each metric is read from its summed state, and its own state is put back after.
    """
    results: dict[str, Any] = {}
    for metric in model.metrics:
        summed = combined.states.get(metric.name)
        if summed is None:
            results.update({name: combined.values[name] for name in _result_names(metric, combined.values)})
            continue
        own = [variable.numpy() for variable in metric.variables]
        try:
            for variable, value in zip(metric.variables, summed):
                variable.assign(value)
            results.update(_results([metric]))
        finally:
            for variable, value in zip(metric.variables, own):
                variable.assign(value)
    others = {name: value for name, value in combined.values.items() if name not in results}
    return {**results, **others}


def with_searcher_metric(metrics: dict[str, Any], searcher_metric: Optional[str]) -> dict[str, Any]:
    """Validation metrics under Keras' names, and also under the searcher's ``val_`` name for one of them.

    Keras names a validation metric ``val_loss`` in ``fit``'s logs and ``loss`` in
    ``evaluate``'s; they are reported as ``loss``, and a ``searcher.metric`` of
    ``val_loss`` (the name a fit's History shows) must find its value too.
    """
    if searcher_metric and searcher_metric.startswith("val_") and searcher_metric[4:] in metrics:
        return {**metrics, searcher_metric: metrics[searcher_metric[4:]]}
    return metrics


def numbers_of(logs: Optional[Mapping[str, Any]]) -> dict[str, float]:
    """The numeric entries of ``logs`` as floats (already combined across processes)."""
    numbers = {key: _to_float(value) for key, value in (logs or {}).items()}
    return {key: value for key, value in numbers.items() if value is not None}


def _to_float(value: Any) -> Optional[float]:
    """A metric's value as a float, or None when it is not a number (a tensor is read)."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        if value.shape.rank != 0:
            return None
        value = value.numpy()
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            return None
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _results(metrics: list) -> dict[str, Any]:
    """The metrics' values as Python numbers (arrays stay arrays), a dict result spread out, as Keras logs them."""
    results: dict[str, Any] = {}
    for metric in metrics:
        result = metric.result()
        if isinstance(result, dict):
            results.update({name: _python(value) for name, value in result.items()})
        else:
            results[metric.name] = _python(result)
    return results


def _result_names(metric: Any, values: Mapping[str, Any]) -> list[str]:
    """The names under which a metric without state put its value(s) into ``values``."""
    if metric.name in values:
        return [metric.name]
    nested = getattr(metric, "metrics", None) or []
    return [inner.name for inner in nested if inner.name in values]


def _other_logs(model: tf.keras.Model, logs: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The entries of ``logs`` that are not a value of the model's metrics, as Python values."""
    if not logs:
        return {}
    names = {metric.name for metric in model.metrics}
    for metric in model.metrics:
        names.update(inner.name for inner in getattr(metric, "metrics", None) or [])
    return {name: _python(value) for name, value in logs.items() if name not in names}


def _examples_seen(model: tf.keras.Model) -> int:
    """The examples the model's loss metric counted (Keras weights it by the batch size); 1 when there is none."""
    for metric in model.metrics:
        count = getattr(metric, "count", None)
        if metric.name == "loss" and isinstance(count, tf.Variable):
            return int(count.numpy())
    return 1


def _python(value: Any) -> Any:
    value = value.numpy() if hasattr(value, "numpy") else value
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    return float(value) if isinstance(value, (float, np.floating)) else value


class GlobalMetrics(tf.keras.callbacks.Callback):
    """Makes the metrics that ``fit`` and ``evaluate`` log those of every process's data.

    Put first among the callbacks, so that every later one (``EarlyStopping``, the
    History that ``fit`` returns, the callback that reports to the store) sees the
    global values: validation metrics at the end of each evaluation, and the epoch's
    training and validation metrics at the end of each epoch. A no-op on one process and
    under a strategy whose metrics are already global.

    Args:
        distributed: this process's place in the job.
    """

    def __init__(self, distributed: DistributedContext) -> None:
        super().__init__()
        self._distributed = distributed
        self._in_fit = False
        self.training: Optional[dict[str, Any]] = None
        self.validation: Optional[dict[str, Any]] = None

    @property
    def active(self) -> bool:
        """Whether there is anything to combine (several processes, each with its own metrics)."""
        return self._distributed.size > 1 and not strategy_spans_processes(self.model)

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self._in_fit = True

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        self._in_fit = False

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        self.training = self.validation = None

    def on_test_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        _heartbeat.beat()  # context.evaluate's steps are progress, not a hang

    def on_test_begin(self, logs: Optional[dict] = None) -> None:
        # Inside fit the metrics still hold the epoch's training states: evaluate resets them next.
        if self.active and self._in_fit and self.training is None:
            self.training = global_metrics(self.model, self._distributed)

    def on_test_end(self, logs: Optional[dict] = None) -> None:
        if not self.active:
            return
        self.validation = global_metrics(self.model, self._distributed, logs)
        if logs is not None:
            logs.update(self.validation)

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if not self.active:
            return
        if self.training is None:  # no validation this epoch: the metrics hold the training states
            self.training = global_metrics(self.model, self._distributed)
        if logs is not None:
            logs.update({name: value for name, value in self.training.items() if name in logs})
            if self.validation is not None:
                logs.update({VALIDATION_PREFIX + name: value for name, value in self.validation.items()})
