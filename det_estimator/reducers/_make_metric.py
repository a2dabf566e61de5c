"""make_metric: an Estimator metric whose value is reduced over every rank's data.

The graph it builds, per metric (see DESIGN.md, "Distributed metrics"):

    update_op: py_func(accumulate this batch)                      -- once per batch
    value_op:  py_func(encode this rank's state)
               -> Horovod allgather of the bytes and of their lengths
               -> py_func(decode all states, cross_slot_reduce)     -- once per evaluation

With one process the value op reduces the local state directly and no Horovod op is
created. Collective names come from the graph's own unique naming, which is the same on
every rank because every rank builds the same model_fn.
"""

import weakref
from typing import Any, Callable, Optional, Union

import numpy as np
import tensorflow as tf

from det_estimator import _horovod
from det_estimator.reducers._accumulator import MetricAccumulator
from det_estimator.reducers._base import MetricReducer
from det_estimator.reducers._function_reducer import FunctionReducer

# Graph -> {value tensor name: its accumulator}, so that the harness can give each
# make_metric the name it has in eval_metric_ops (for error messages).
_ACCUMULATORS: "weakref.WeakKeyDictionary[tf.Graph, dict[str, MetricAccumulator]]" = weakref.WeakKeyDictionary()

MetricStructure = Union[tf.Tensor, list[tf.Tensor], dict[str, tf.Tensor]]
Reducer = Union[Callable[[list[Any]], Any], MetricReducer]


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

            def reduce_gathered(gathered: np.ndarray, gathered_sizes: np.ndarray) -> np.ndarray:
                return accumulator.reduce_encoded(gathered, gathered_sizes, value_dtype)

            reduce_value: Callable[..., np.ndarray] = reduce_gathered
        else:
            reduce_inputs = []

            def reduce_local() -> np.ndarray:
                return accumulator.reduce_local(value_dtype)

            reduce_value = reduce_local

        value_op = tf.compat.v1.py_func(
            reduce_value, reduce_inputs, tf.as_dtype(value_dtype), stateful=True, name="reduce"
        )
    _ACCUMULATORS.setdefault(graph, {})[value_op.name] = accumulator
    return value_op, update_op


def accumulator_of(value_op: Any) -> Optional[MetricAccumulator]:
    """The accumulator behind a ``value_op`` returned by :func:`make_metric`, or None."""
    if not tf.is_tensor(value_op):
        return None
    return _ACCUMULATORS.get(value_op.graph, {}).get(value_op.name)


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
