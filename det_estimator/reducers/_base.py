"""The interface every metric reducer implements."""

import abc
from typing import Any


class MetricReducer(abc.ABC):
    """Computes one validation metric exactly across several workers.

    Each worker owns its own reducer instance. During an evaluation the
    framework calls :meth:`accumulate` once per batch on every worker; the value
    returned by the last call is that worker's state. The states of all workers
    are then gathered (pickled and sent over the network) and passed together to
    :meth:`cross_slot_reduce` on a single instance, which returns the metric.

    Because a state is all that travels between processes, it should be small
    and cheap to pickle: NumPy arrays, integers, tuples of those.

    Every evaluation starts from a fresh state: ``make_metric`` calls
    :meth:`accumulate` on a ``copy.deepcopy`` of the reducer it was given, made
    anew for each evaluation, never on that instance itself. One instance can
    therefore be created once and passed to every evaluation, and a reducer must
    be copyable with ``copy.deepcopy``. Used directly on NumPy arrays, take one
    instance per pass over the data (the built-in reducers also offer
    ``reset()``).

    Example:
        A reducer computing the largest prediction seen on any worker::

            import numpy as np

            class MaxPrediction(MetricReducer):
                def __init__(self) -> None:
                    self._max = -np.inf

                def accumulate(self, metric):
                    batch_max = np.max(metric["predictions"], initial=-np.inf)
                    self._max = max(self._max, float(batch_max))
                    return self._max

                def cross_slot_reduce(self, per_slot_metrics):
                    return np.float64(max(per_slot_metrics))
    """

    @abc.abstractmethod
    def accumulate(self, metric: Any) -> Any:
        """Adds one batch to this worker's state.

        Args:
            metric: The batch, in whatever form the reducer documents (for the
                built-in reducers, a dict of NumPy arrays).

        Returns:
            The worker's accumulated state so far. The framework keeps the
            value returned by the last call as the worker's final state.
        """

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        """Combines the final states of all workers into the metric value.

        Args:
            per_slot_metrics: One final state per worker, as returned by the
                last :meth:`accumulate` call on that worker, in rank order.
                Workers that saw no batch in this evaluation are left out, so
                the list may be shorter than the number of workers; it is never
                empty.

        Returns:
            The metric value.
        """
