"""Keras metrics over every process's data: the metrics' states summed across processes, then read.

On N processes each one's ``model.fit`` and ``model.evaluate`` see only its share of the
data, so the values Keras logs are that share's. The states of Keras' metrics are sums
(``total`` and ``count`` of a mean, the confusion counts of ``AUC``, ``Precision``,
...), so the sum of every process's state is the state one process would have after
seeing all the data: reading the metric from it gives the exact global value, weighted
by the examples (or sample weights) each process saw. The reference system averages
each process's value instead, which is wrong for uneven shares and for ratios like AUC.

A metric of your own whose state is not a sum (a maximum, a last value) would be
combined wrongly; keep such metrics out of distributed runs or make their state additive.
"""

from typing import Any, Optional

import tensorflow as tf

from det_estimator.core import DistributedContext

VALIDATION_PREFIX = "val_"


def global_metrics(model: tf.keras.Model, distributed: DistributedContext) -> dict[str, Any]:
    """The model's metric values over every process's data (a collective: every process calls it).

    On one process they are the model's own values. On several, every metric's state
    becomes the sum of all processes' states (on each process), and is read.

    Args:
        model: the compiled model whose metrics hold this process's states.
        distributed: this process's place in the job.

    Returns:
        Metric name to value, as ``model.evaluate(..., return_dict=True)`` names them.
    """
    metrics = model.metrics
    if distributed.size > 1:
        states = [[variable.numpy() for variable in metric.variables] for metric in metrics]
        gathered = distributed.allgather(states)
        for index, metric in enumerate(metrics):
            for position, variable in enumerate(metric.variables):
                variable.assign(sum(process[index][position] for process in gathered))
    return {name: _python(value) for name, value in model.get_metrics_result().items()}


def _python(value: Any) -> Any:
    value = value.numpy() if hasattr(value, "numpy") else value
    return value.item() if hasattr(value, "item") and getattr(value, "size", 0) == 1 else value


class GlobalMetrics(tf.keras.callbacks.Callback):
    """Makes the metrics that ``fit`` and ``evaluate`` log those of every process's data.

    Put first among the callbacks, so that every later one (``EarlyStopping``, the
    History that ``fit`` returns, the callback that reports to the store) sees the
    global values: validation metrics at the end of each evaluation, and the epoch's
    training and validation metrics at the end of each epoch. A no-op on one process.

    Args:
        distributed: this process's place in the job.
    """

    def __init__(self, distributed: DistributedContext) -> None:
        super().__init__()
        self._distributed = distributed
        self._in_fit = False
        self._training: Optional[dict[str, Any]] = None
        self._validation: Optional[dict[str, Any]] = None

    @property
    def active(self) -> bool:
        """Whether there is anything to combine (several processes)."""
        return self._distributed.size > 1

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self._in_fit = True

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        self._in_fit = False

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        self._training = self._validation = None

    def on_test_begin(self, logs: Optional[dict] = None) -> None:
        # Inside fit the metrics still hold the epoch's training states: evaluate resets them next.
        if self.active and self._in_fit and self._training is None:
            self._training = global_metrics(self.model, self._distributed)

    def on_test_end(self, logs: Optional[dict] = None) -> None:
        if not self.active:
            return
        self._validation = global_metrics(self.model, self._distributed)
        if logs is not None:
            logs.update(self._validation)

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if not self.active:
            return
        if self._training is None:  # no validation this epoch: the metrics hold the training states
            self._training = global_metrics(self.model, self._distributed)
        if logs is not None:
            logs.update({name: value for name, value in self._training.items() if name in logs})
            if self._validation is not None:
                logs.update({VALIDATION_PREFIX + name: value for name, value in self._validation.items()})
