"""How one rank's metrics are combined with the other ranks': the one policy every front door follows.

On N processes each one evaluates (and trains on) its share of the data, and an average
of the shares' values is not the value of all the data: not for a ratio like AUC or
precision, and not even for a mean when the shares are uneven. Every controller and
callback therefore hands its rank's metrics to :func:`combine_across_ranks`, sorted by
what they are:

- **global** values (a reducer's, through ``make_metric`` or ``ReducerMetric``) are
  already computed over every rank's data: they pass through;
- **states** of a framework's stateful metric (a Keras metric's variables: the total and
  count of a mean, the confusion counts of ``AUC`` or ``Precision``) are sums over
  examples: the ranks' states are summed, and the framework reads the metric from the
  sum, which is the state one process would have after seeing all the data;
- plain **values** (an Estimator ``tf.metrics`` value, a loss in a script's logs) are
  weighted by the examples their rank saw.

A rank that saw no example adds its (empty) states and nothing else, so it neither
breaks nor biases the result.

Nothing here imports TensorFlow: the framework-specific parts (reading a Keras metric's
state, and its value from a summed state) live with each framework.
"""

import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from det_estimator.core._distributed import DistributedContext


@dataclass(frozen=True)
class RankMetrics:
    """What one rank contributes to a combined set of metrics.

    Attributes:
        examples: how many examples this rank's values stand for (the batches of a
            training workload when examples are not counted); 0 for a rank that saw none.
        values: plain numbers, each combined as the mean over ranks weighted by ``examples``.
        global_values: values already over every rank's data (or not numbers to weigh),
            passed through: the first rank's that has each.
        states: each stateful metric's state arrays, by metric name, summed over ranks.
    """

    examples: int
    values: Mapping[str, float] = field(default_factory=dict)
    global_values: Mapping[str, Any] = field(default_factory=dict)
    states: Mapping[str, Sequence[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class CombinedMetrics:
    """The metrics of every rank's data together.

    Attributes:
        examples: the examples of all ranks.
        values: the global values and the weighted means of the plain values, by name.
        states: each stateful metric's state summed over the ranks, to read its value from.
    """

    examples: int
    values: dict[str, Any]
    states: dict[str, list[Any]]


def combine_across_ranks(
    mine: RankMetrics, distributed: DistributedContext, *, across_ranks: bool = True
) -> CombinedMetrics:
    """Combines this rank's metrics with every other rank's (a collective: every rank calls it).

    Args:
        mine: this rank's metrics.
        distributed: this process's place in the job.
        across_ranks: False to take this rank's metrics alone, with no collective (the
            experiment config's ``optimizations.average_training_metrics: false``).

    Returns:
        The combined metrics, the same on every rank.
    """
    per_rank = distributed.allgather(mine) if across_ranks and distributed.size > 1 else [mine]
    return combine(per_rank)


def combine(per_rank: Sequence[RankMetrics]) -> CombinedMetrics:
    """The policy itself, on every rank's metrics in rank order (what :func:`combine_across_ranks` gathers)."""
    evaluated = [rank for rank in per_rank if rank.examples > 0]
    values: dict[str, Any] = {}
    for rank in per_rank:
        for name, value in rank.global_values.items():
            values.setdefault(name, value)
    for name in _names_in_order(rank.values for rank in evaluated):
        having = [rank for rank in evaluated if name in rank.values]
        weight = sum(rank.examples for rank in having)
        values[name] = sum(rank.examples * float(rank.values[name]) for rank in having) / weight
    states = {name: _summed_state(name, per_rank) for name in _names_in_order(rank.states for rank in per_rank)}
    return CombinedMetrics(sum(rank.examples for rank in per_rank), values, states)


def _summed_state(name: str, per_rank: Sequence[RankMetrics]) -> list[Any]:
    """Metric ``name``'s state arrays, each the sum of every rank's.

    Raises:
        ValueError: the ranks hold different states for it (their models' metrics differ).
    """
    shapes = [len(rank.states[name]) if name in rank.states else None for rank in per_rank]
    if len(set(shapes)) != 1:
        raise ValueError(
            f"The ranks hold different states of metric {name!r} (state arrays per rank, None for none: {shapes}). "
            "Every process must compile the same model with the same metrics."
        )
    return [functools.reduce(operator.add, parts) for parts in zip(*(rank.states[name] for rank in per_rank))]


def _names_in_order(mappings: Any) -> list[str]:
    """The keys of every mapping, each once, in the order they first appear (rank order, then each rank's)."""
    return list(dict.fromkeys(name for mapping in mappings for name in mapping))
