"""make_metric: an Estimator metric whose value is reduced over every rank's data.

The graph it builds, per metric (see DESIGN.md, "Distributed metrics"):

    update_op: py_func(accumulate this batch)                      -- once per batch
    value_op:  py_func(encode this rank's state)
               -> Horovod allgather of the bytes and of their lengths
               -> py_func(decode all states, cross_slot_reduce)     -- once per evaluation

With one process the value op reduces the local state directly and no Horovod op is
created. Collective names come from the graph's own unique naming, which is the same on
every rank because every rank builds the same model_fn.

The trial controllers feed the metrics another way (:func:`fed_by_hook`): one
``SessionRunHook`` fetches every metric's tensors with each evaluation step and
accumulates them on the thread that runs the evaluation, and the update ops become a
no-op. A ``py_func`` runs its Python on one of TensorFlow's own threads, which must take
the interpreter over from the thread waiting in ``session.run`` for every batch; the
fetch costs less per batch (``benchmarks/reducers.py`` prints both). The ``py_func``
stays for a ``make_metric`` in a plain ``tf.estimator``, which no controller builds.
"""

import dataclasses
import weakref
from typing import Any, Callable, Optional, Union

import numpy as np
import tensorflow as tf

from det_estimator import _horovod
from det_estimator.reducers._accumulator import MetricAccumulator
from det_estimator.reducers._base import MetricReducer
from det_estimator.reducers._function_reducer import FunctionReducer

MetricStructure = Union[tf.Tensor, list[tf.Tensor], dict[str, tf.Tensor]]
Reducer = Union[Callable[[list[Any]], Any], MetricReducer]


@dataclasses.dataclass(frozen=True, eq=False)
class _MadeMetric:
    """What one make_metric call built: enough to feed its accumulator without its update op.

    Tensors are held by name: a tensor holds its graph, which would then never leave
    ``_MADE``, a dict that holds its graphs weakly.
    """

    accumulator: MetricAccumulator
    leaf_names: tuple[str, ...]
    rebuild: Callable[[tuple[np.ndarray, ...]], Any]
    update_op_name: str


# Graph -> {value tensor name: what make_metric built}, so that the harness can give each
# make_metric the name it has in eval_metric_ops (for error messages) and feed it by hook.
_MADE: "weakref.WeakKeyDictionary[tf.Graph, dict[str, _MadeMetric]]" = weakref.WeakKeyDictionary()


def make_metric(
    metric: MetricStructure,
    reducer: Reducer,
    numpy_dtype: Any,
    name: str = "",
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns an ``eval_metric_ops`` entry computed correctly across all ranks.

    Args:
        metric: a Tensor, a flat list of Tensors, or a flat dict of str to Tensor; each
            batch's values reach the reducer as NumPy arrays in the same structure.
        reducer: a function of the list of all per-batch values, or a ``MetricReducer``.
            Every evaluation works on a fresh ``copy.deepcopy`` of it, so one instance
            can be reused for every evaluation.
        numpy_dtype: the dtype of the final value; anything ``np.dtype()`` accepts.
        name: how error messages refer to the metric (default: its graph name).

    Returns:
        ``(value_op, update_op)``, as ``tf.estimator.EstimatorSpec.eval_metric_ops`` expects.

    Raises:
        TypeError: ``metric``, ``reducer`` or ``numpy_dtype`` is not of a supported kind, or
            ``copy.deepcopy`` cannot copy the reducer.
    """
    leaves, rebuild = _flatten(metric)
    reducer = _as_reducer(reducer)
    value_dtype = _value_dtype(numpy_dtype)

    graph = tf.compat.v1.get_default_graph()
    scope = graph.unique_name("det_metric", mark_as_used=True)
    accumulator = MetricAccumulator(reducer, name=name or scope, rank=_horovod.rank())

    def accumulate(*arrays: np.ndarray) -> np.int64:
        return np.int64(accumulator.accumulate(rebuild(arrays)))

    with tf.compat.v1.name_scope(scope + "/"):
        update_op = tf.compat.v1.py_func(accumulate, leaves, tf.int64, stateful=True, name="accumulate")
        if _horovod.is_distributed():
            local_bytes = tf.compat.v1.py_func(
                lambda: np.frombuffer(accumulator.encode(), dtype=np.uint8), [], tf.uint8, stateful=True, name="encode"
            )
            local_bytes.set_shape([None])
            all_bytes, sizes = _horovod.allgather_bytes(local_bytes, name=scope)
            reduce_inputs = [all_bytes, sizes]

            def reduce_value(gathered: np.ndarray, gathered_sizes: np.ndarray) -> np.ndarray:
                return accumulator.reduce_encoded(gathered, gathered_sizes, value_dtype)
        else:
            reduce_inputs = []

            def reduce_value() -> np.ndarray:
                return accumulator.reduce_local(value_dtype)

        value_op = tf.compat.v1.py_func(
            reduce_value, reduce_inputs, tf.as_dtype(value_dtype), stateful=True, name="reduce"
        )
    made = _MadeMetric(accumulator, tuple(leaf.name for leaf in leaves), rebuild, update_op.name)
    _MADE.setdefault(graph, {})[value_op.name] = made
    return value_op, update_op


def accumulator_of(value_op: Any) -> Optional[MetricAccumulator]:
    """The accumulator behind a ``value_op`` returned by :func:`make_metric`, or None."""
    made = _made_metric_of(value_op)
    return None if made is None else made.accumulator


def fed_by_hook(eval_metric_ops: dict[str, Any]) -> tuple[dict[str, Any], Optional[tf.estimator.SessionRunHook]]:
    """``eval_metric_ops`` with its make_metric entries fed by one hook instead of their ``py_func``.

    An entry is changed only if it is exactly a ``(value_op, update_op)`` pair that
    make_metric returned and its tensors can be fetched (none is inside a loop or a
    condition); anything else, a user's own grouping of the update op included, is
    left as it is. Evaluating the changed entries without the hook would accumulate
    nothing, and fail as an evaluation in which no rank saw a batch.

    Returns:
        The new ``eval_metric_ops``, and the hook to add to the evaluation's hooks (None
        when no entry changed).
    """
    graph = tf.compat.v1.get_default_graph()
    made_pairs = {
        key: (metric[1], made)
        for key, metric in eval_metric_ops.items()
        if isinstance(metric, (tuple, list)) and len(metric) == 2 and (made := _made_metric_of(metric[0]))
    }
    # A metric whose update op also runs in the user's own form, under any key, stays fed by it.
    # (_MadeMetric compares by identity.)
    regrouped = [made for update_op, made in made_pairs.values() if _name(update_op) != made.update_op_name]
    fed: list[_MadeMetric] = []
    for _, made in made_pairs.values():
        if made not in fed and made not in regrouped and _fetchable(made, graph):
            fed.append(made)
    if not fed:
        return dict(eval_metric_ops), None
    no_op = tf.no_op(name="det_metric_fed_by_hook")
    changed = {
        key: (metric[0], no_op) if key in made_pairs and made_pairs[key][1] in fed else metric
        for key, metric in eval_metric_ops.items()
    }
    return changed, _FeedingHook(fed, graph)


class _FeedingHook(tf.estimator.SessionRunHook):
    """Fetches the tensors of make_metric metrics with each evaluation step, and accumulates them."""

    def __init__(self, metrics: list[_MadeMetric], graph: tf.Graph) -> None:
        self._metrics = metrics
        leaves = [[graph.get_tensor_by_name(name) for name in made.leaf_names] for made in metrics]
        self._fetches = tf.estimator.SessionRunArgs(leaves)

    def before_run(self, run_context: tf.estimator.SessionRunContext) -> tf.estimator.SessionRunArgs:
        return self._fetches

    def after_run(self, run_context: tf.estimator.SessionRunContext, run_values: tf.estimator.SessionRunValues) -> None:
        # Fetched values are what the py_func would be handed: arrays, NumPy scalars for 0-d tensors.
        for made, values in zip(self._metrics, run_values.results):
            made.accumulator.accumulate(made.rebuild(tuple(values)))


def _made_metric_of(value_op: Any) -> Optional[_MadeMetric]:
    if not tf.is_tensor(value_op):
        return None
    return _MADE.get(value_op.graph, {}).get(value_op.name)


def _name(op: Any) -> str:
    return getattr(op, "name", "")


def _fetchable(made: _MadeMetric, graph: tf.Graph) -> bool:
    return all(graph.is_fetchable(graph.get_tensor_by_name(name)) for name in made.leaf_names)


def _flatten(metric: Any) -> tuple[list[tf.Tensor], Callable[[tuple[np.ndarray, ...]], Any]]:
    """The metric's tensors as a flat list, and how to rebuild its structure from arrays."""
    expected = "a Tensor, a flat list of Tensors or a flat dict of str to Tensor"
    if tf.is_tensor(metric):
        return [metric], lambda arrays: arrays[0]
    if isinstance(metric, (list, tuple)) and metric:
        for index, leaf in enumerate(metric):
            _check_leaf(leaf, f"metric[{index}]", expected)
        return list(metric), list
    if isinstance(metric, dict) and metric:
        for key, leaf in metric.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"Argument `metric` must be {expected}. Received a dict key {key!r} of type {type(key)}"
                )
            _check_leaf(leaf, f"metric[{key!r}]", expected)
        keys = sorted(metric)
        return [metric[key] for key in keys], lambda arrays: dict(zip(keys, arrays))
    raise TypeError(f"Argument `metric` must be {expected}. Received: metric={metric!r} of type {type(metric)}")


def _check_leaf(leaf: Any, where: str, expected: str) -> None:
    if not tf.is_tensor(leaf):
        nested = " (nested structures are not supported)" if isinstance(leaf, (list, tuple, dict)) else ""
        raise TypeError(f"Argument `metric` must be {expected}. Received: {where}={leaf!r}{nested}")


def _as_reducer(reducer: Any) -> MetricReducer:
    if isinstance(reducer, MetricReducer):
        return reducer
    if callable(reducer) and not isinstance(reducer, type):
        return FunctionReducer(reducer)
    raise TypeError(
        "Argument `reducer` must be a MetricReducer instance or a function of the list of per-batch values. "
        f"Received: reducer={reducer!r}"
    )


def _value_dtype(numpy_dtype: Any) -> np.dtype:
    try:
        dtype = np.dtype(numpy_dtype)
        tf.as_dtype(dtype)
    except TypeError as error:
        raise TypeError(
            "Argument `numpy_dtype` must be a NumPy dtype that TensorFlow can represent, such as np.float32. "
            f"Received: numpy_dtype={numpy_dtype!r} ({error})"
        ) from None
    return dtype
