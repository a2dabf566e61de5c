"""Which checkpoints of a trial to keep: the ``save_trial_latest`` and ``save_trial_best`` policy."""

import math
from collections.abc import Collection, Sequence
from typing import Optional

from det_estimator.checkpoint import _metadata
from det_estimator.checkpoint._checkpoint import Checkpoint


def recency_key(checkpoint: Checkpoint) -> tuple[int, str, str]:
    """Orders checkpoints oldest first: by steps completed, then creation time, then uuid.

    The uuid only breaks exact ties, so that the order never depends on the order in
    which the file system lists directories.
    """
    return (checkpoint.steps_completed, checkpoint.created, checkpoint.uuid)


def select_to_delete(
    checkpoints: Sequence[Checkpoint],
    save_latest: int,
    save_best: int,
    metric: Optional[str],
    smaller_is_better: bool,
    keep: Collection[str] = (),
) -> list[Checkpoint]:
    """Selects the checkpoints that neither the "latest" nor the "best" rule keeps.

    Args:
        checkpoints: The trial's checkpoints, in any order.
        save_latest: How many of the most recent checkpoints (by steps completed) to keep.
        save_best: How many of the best checkpoints by ``metric`` to keep.
        metric: The validation metric that ranks checkpoints; only checkpoints with a
            numeric, non-NaN value for it can be among the best.
        smaller_is_better: Whether a smaller metric value is better.
        keep: uuids of checkpoints kept whatever the rules say (the experiment's best).

    Returns:
        The checkpoints to delete, oldest first.

    Raises:
        ValueError: If a count is negative, or ``save_best`` is positive without a metric.
    """
    for name, count in (("save_latest", save_latest), ("save_best", save_best)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"Argument `{name}` must be an int >= 0. Received: {name}={count!r}")
    if save_best > 0 and metric is None:
        raise ValueError(
            f"Argument `metric` must name the validation metric that ranks checkpoints when save_best > 0. "
            f"Received: metric=None, save_best={save_best}"
        )
    ordered = sorted(checkpoints, key=recency_key)
    kept = set(ordered[max(len(ordered) - save_latest, 0) :]) if save_latest else set()
    if save_best and metric is not None:
        kept.update(_best(ordered, save_best, metric, smaller_is_better))
    return [checkpoint for checkpoint in ordered if checkpoint not in kept and checkpoint.uuid not in keep]


def _best(ordered: Sequence[Checkpoint], count: int, metric: str, smaller_is_better: bool) -> list[Checkpoint]:
    """The ``count`` best checkpoints by ``metric``; between equal values the more recent one wins."""
    sign = 1.0 if smaller_is_better else -1.0
    ranked = []
    for position, checkpoint in enumerate(ordered):
        value = _metadata.metric_value(checkpoint.metadata, metric)
        if not math.isnan(value):
            ranked.append((sign * value, -position, checkpoint))
    ranked.sort(key=lambda item: item[:2])
    return [checkpoint for _, _, checkpoint in ranked[:count]]
