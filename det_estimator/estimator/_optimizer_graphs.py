"""What a ``tf.compat.v1`` optimizer keeps of the graphs that evaluations and exports build."""

from typing import Any

import tensorflow as tf


def release_other_graphs(optimizer: Any, keep: tf.Graph) -> None:
    """Drops the variables ``optimizer`` keeps of every graph but ``keep`` (the training graph).

    An optimizer made once, in ``build_estimator()``, is used by the model_fn that every
    ``estimator.evaluate`` (and export) calls anew in a graph of its own; a model_fn that
    calls ``minimize`` in every mode, as many do, makes the optimizer create its slots
    (Adam's ``m`` and ``v``) and non-slot variables (Adam's beta powers) in that graph too,
    kept in dicts on the optimizer. Each evaluation's whole graph then stays alive, some
    megabytes each, for as long as the trial runs. Only the training graph's are used again.

    Args:
        optimizer: an optimizer passed to ``context.wrap_optimizer``; any other than a
            ``tf.compat.v1.train.Optimizer`` is left alone.
        keep: the graph whose variables the optimizer keeps.
    """
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return
    for per_variable in getattr(optimizer, "_slots", {}).values():
        for key in [key for key, slot in per_variable.items() if getattr(slot, "graph", keep) is not keep]:
            del per_variable[key]
    non_slot = getattr(optimizer, "_non_slot_dict", {})
    # Keyed by (name, graph) in TensorFlow 1's optimizers.
    for key in [key for key in non_slot if isinstance(key, tuple) and len(key) == 2 and key[1] is not keep]:
        if isinstance(key[1], tf.Graph):
            del non_slot[key]
