"""Input checks and warnings shared by the built-in reducers.

Every check raises ``ValueError`` with a message that names the reducer and the
offending key, because the errors surface far from the code that built the
batch (inside an evaluation loop, possibly on a remote worker).
"""

import contextlib
import contextvars
import math
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Optional

import numpy as np

LABELED_KEYS = ("labels", "predictions", "weights")

# The metric whose cross_slot_reduce runs on this thread. An evaluation often reduces
# several metrics with one reducer type (the AUC of clicks and of conversions), and
# "RocAuc: only negative examples occur" alone does not say which of them is undefined.
# A context variable, not a warnings filter: those are process-wide, and reductions may
# run while other threads warn.
_metric_being_reduced: contextvars.ContextVar[str] = contextvars.ContextVar("metric_being_reduced", default="")


@contextlib.contextmanager
def reducing_metric(name: str) -> Iterator[None]:
    """Within it, :func:`warn_undefined` on this thread names the metric ``name``."""
    token = _metric_being_reduced.set(name)
    try:
        yield
    finally:
        _metric_being_reduced.reset(token)


def warn_undefined(message: str) -> None:
    """A RuntimeWarning that a reducer's value is undefined, naming the metric being reduced if known.

    The warning points at the caller of the reducer method that calls this function.
    """
    metric = _metric_being_reduced.get()
    warnings.warn(f"Metric {metric!r}: {message}" if metric else message, RuntimeWarning, stacklevel=3)


class LabeledBatch(NamedTuple):
    """One validated batch of a labeled metric.

    Attributes:
        labels: 1-D array.
        predictions: 1-D array with one entry per label, or a 2-D array
            ``[len(labels), columns]`` when per-class scores were accepted.
        weights: 1-D float array with one entry per label, or None.
    """

    labels: np.ndarray
    predictions: np.ndarray
    weights: Optional[np.ndarray]


def invalid_argument(name: str, rule: str, value: Any) -> ValueError:
    """Builds the error raised for an invalid constructor argument.

    Args:
        name: Argument name.
        rule: What the argument must be, e.g. "a positive integer".
        value: The value received.

    Returns:
        A ValueError with a uniform message.
    """
    return ValueError(f"Argument `{name}` must be {rule}. Received: {name}={value!r}")


def no_examples_error(reducer: str) -> ValueError:
    """Builds the error raised when an evaluation saw no examples at all."""
    return ValueError(
        f"{reducer}: no examples were accumulated on any worker (or every example "
        "had weight 0), so the metric is undefined."
    )


def numeric_array(reducer: str, key: str, value: Any) -> np.ndarray:
    """Converts ``value`` to a NumPy array of a real numeric or bool dtype.

    Args:
        reducer: Reducer name, for error messages.
        key: Name of the input, for error messages.
        value: Anything ``np.asarray`` accepts.

    Returns:
        The array, unflattened.

    Raises:
        ValueError: If the dtype is not bool, integer or floating point.
    """
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{reducer}: `{key}` must hold real numbers or bools. Received dtype {array.dtype}.")
    return array


def check_finite(reducer: str, key: str, array: np.ndarray, allow_inf: bool = False) -> None:
    """Rejects NaN (and, unless allowed, infinite) values.

    Args:
        reducer: Reducer name, for error messages.
        key: Name of the input, for error messages.
        array: Array to check.
        allow_inf: Whether +-inf values are meaningful for this input.

    Raises:
        ValueError: If the array holds NaN, or inf when not allowed.
    """
    if array.dtype.kind != "f" or array.size == 0:
        return
    # A finite sum proves there is no NaN or inf, at the cost of one cheap
    # pass; only the rare failing case pays for counting.
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(array)):
            return
    nan_count = int(np.count_nonzero(np.isnan(array)))
    if nan_count:
        raise ValueError(
            f"{reducer}: `{key}` contains {nan_count} NaN value(s) out of "
            f"{array.size}; {reducer} is undefined for NaN inputs."
        )
    inf_count = int(np.count_nonzero(np.isinf(array)))
    if inf_count and not allow_inf:
        raise ValueError(
            f"{reducer}: `{key}` contains {inf_count} infinite value(s) out of "
            f"{array.size}; {reducer} needs finite `{key}`."
        )


def check_weights(reducer: str, weights: Any, size: int) -> np.ndarray:
    """Validates per-example weights.

    Args:
        reducer: Reducer name, for error messages.
        weights: Weights, anything ``np.asarray`` accepts.
        size: Number of examples the weights must match.

    Returns:
        The weights, flattened, as float32 or float64.

    Raises:
        ValueError: On a size mismatch, NaN, inf or negative weights.
    """
    array = numeric_array(reducer, "weights", weights)
    if array.size != size:
        raise ValueError(
            f"{reducer}: `weights` has shape {array.shape} ({array.size} elements) "
            f"but there are {size} examples; expected one weight per example "
            "(inputs are flattened)."
        )
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    array = array.reshape(-1)
    check_finite(reducer, "weights", array)
    negative = int(np.count_nonzero(array < 0))
    if negative:
        raise ValueError(
            f"{reducer}: `weights` contains {negative} negative value(s); weights "
            "must be >= 0 (use 0 to drop an example)."
        )
    return array


def _as_mapping(reducer: str, metric: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(metric, Mapping):
        raise ValueError(f"{reducer}: expected a dict with keys {list(allowed)}. Received: {type(metric).__name__}.")
    unknown = sorted(set(metric) - set(allowed))
    if unknown:
        # A misspelled key such as "weight" must not silently give an
        # unweighted result.
        raise ValueError(f"{reducer}: unexpected key(s) {unknown}; allowed keys are {list(allowed)}.")
    return metric


def _shape_error(reducer: str, key: str, array: np.ndarray, labels: np.ndarray, rule: str) -> ValueError:
    return ValueError(
        f"{reducer}: `{key}` has shape {array.shape} ({array.size} elements) but "
        f"`labels` has shape {labels.shape} ({labels.size} elements); expected {rule}."
    )


def parse_labeled_batch(
    reducer: str,
    metric: Any,
    *,
    allow_inf_predictions: bool = False,
    prediction_columns: Optional[int] = None,
) -> LabeledBatch:
    """Validates a ``{"labels", "predictions", "weights"?}`` batch.

    Args:
        reducer: Reducer name, for error messages.
        metric: The batch dict.
        allow_inf_predictions: Whether +-inf predictions are meaningful (they
            are for rankings and thresholds, not for errors or losses).
        prediction_columns: If set, predictions whose last dimension has this
            size and that hold exactly that many values per label are kept as
            a 2-D ``[n, prediction_columns]`` array (per-class scores).

    Returns:
        The flattened, validated batch.

    Raises:
        ValueError: On missing or unknown keys, non-numeric values, mismatched
            sizes, NaN values or invalid weights.
    """
    metric = _as_mapping(reducer, metric, LABELED_KEYS)
    for key in ("labels", "predictions"):
        if key not in metric:
            raise ValueError(f"{reducer}: the metric dict has no `{key}` key.")
    labels = numeric_array(reducer, "labels", metric["labels"]).reshape(-1)
    predictions = numeric_array(reducer, "predictions", metric["predictions"])
    n = labels.size
    columns = prediction_columns
    if (
        columns is not None
        and predictions.ndim >= 2
        and predictions.shape[-1] == columns
        and predictions.size == n * columns
    ):
        predictions = predictions.reshape(n, columns)
    elif predictions.size == n:
        predictions = predictions.reshape(-1)
    else:
        rule = "the same number of elements (inputs are flattened)"
        if columns is not None:
            rule += f", or scores of shape [{n}, {columns}]"
        raise _shape_error(reducer, "predictions", predictions, labels, rule)
    check_finite(reducer, "labels", labels)
    check_finite(reducer, "predictions", predictions, allow_inf=allow_inf_predictions)
    weights = metric.get("weights")
    if weights is not None:
        weights = check_weights(reducer, weights, n)
    return LabeledBatch(labels, predictions, weights)


class BinaryBatch(NamedTuple):
    """One validated batch of a binary metric.

    Attributes:
        is_positive: 1-D bool array, True for the examples labeled 1.
        predictions: 1-D array with one entry per label.
        weights: 1-D float array with one entry per label, or None.
    """

    is_positive: np.ndarray
    predictions: np.ndarray
    weights: Optional[np.ndarray]


def parse_binary_batch(reducer: str, metric: Any, *, allow_inf_predictions: bool = False) -> BinaryBatch:
    """Validates a ``{"labels": 0/1 or bool, "predictions", "weights"?}`` batch.

    Accepts and rejects exactly what :func:`parse_labeled_batch` followed by
    :func:`binary_labels` do, with the same messages; a valid batch of the
    usual dtypes costs a handful of NumPy calls instead of a dozen, which
    matters when an evaluation has many small batches.

    Args:
        reducer: Reducer name, for error messages.
        metric: The batch dict.
        allow_inf_predictions: Whether +-inf predictions are meaningful.

    Returns:
        The flattened, validated batch.

    Raises:
        ValueError: As :func:`parse_labeled_batch` and :func:`binary_labels`.
    """
    batch = _quick_binary_batch(reducer, metric)
    if batch is not None:
        return batch
    # Something is unusual (or invalid): the thorough checks decide, and word the error.
    labeled = parse_labeled_batch(reducer, metric, allow_inf_predictions=allow_inf_predictions)
    return BinaryBatch(binary_labels(reducer, labeled.labels), labeled.predictions, labeled.weights)


def _quick_binary_batch(reducer: str, metric: Any) -> Optional[BinaryBatch]:
    """The batch if cheap checks prove it valid and finite, else None."""
    if type(metric) is not dict or not metric.keys() <= _LABELED_KEY_SET:
        return None
    labels, predictions = np.asarray(metric.get("labels")), np.asarray(metric.get("predictions"))
    label_kind, prediction_kind = labels.dtype.kind, predictions.dtype.kind
    if label_kind not in "biuf" or prediction_kind not in "biuf" or labels.size != predictions.size:
        return None
    labels, predictions = labels.ravel(), predictions.ravel()
    # A finite sum of squares proves that no prediction is NaN or infinite.
    if prediction_kind == "f" and not math.isfinite(np.dot(predictions, predictions)):
        return None
    if label_kind == "b":
        is_positive = labels
    else:
        is_positive = labels == 1
        # Binary when every nonzero label is a 1. Float labels are counted on their bit
        # patterns, which is faster; -0.0 then fails here and is accepted by the full check.
        bits = labels
        if label_kind == "f":
            if labels.dtype.itemsize not in _SAME_SIZE_INT:
                return None
            bits = labels.view(_SAME_SIZE_INT[labels.dtype.itemsize])
        if np.count_nonzero(bits) != np.count_nonzero(is_positive):
            return None
    weights = metric.get("weights")
    if weights is not None:
        weights = check_weights(reducer, weights, labels.size)
    return BinaryBatch(is_positive, predictions, weights)


_LABELED_KEY_SET = frozenset(LABELED_KEYS)
_SAME_SIZE_INT = {2: np.int16, 4: np.int32, 8: np.int64}


def parse_values(reducer: str, metric: Any) -> np.ndarray:
    """Validates the input of an unweighted aggregation.

    Args:
        reducer: Reducer name, for error messages.
        metric: An array-like, or a dict with the single key "values".

    Returns:
        The values, flattened.

    Raises:
        ValueError: On other dict keys (weights in particular), non-numeric
            values, NaN or inf.
    """
    if isinstance(metric, Mapping):
        if set(metric) != {"values"}:
            raise ValueError(
                f"{reducer}: a dict metric must have exactly the key 'values'. "
                f"Received keys {sorted(metric)}. {reducer} is unweighted; use "
                "WeightedMean for weights."
            )
        metric = metric["values"]
    values = numeric_array(reducer, "values", metric).reshape(-1)
    check_finite(reducer, "values", values)
    return values


def parse_weighted_values(reducer: str, metric: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validates a ``{"values", "weights"}`` batch.

    Args:
        reducer: Reducer name, for error messages.
        metric: The batch dict.

    Returns:
        ``(values, weights)``, flattened, of the same size.

    Raises:
        ValueError: On missing or unknown keys, mismatched sizes, NaN, inf or
            negative weights.
    """
    metric = _as_mapping(reducer, metric, ("values", "weights"))
    if set(metric) != {"values", "weights"}:
        raise ValueError(f"{reducer}: the metric dict needs both 'values' and 'weights' keys.")
    values = numeric_array(reducer, "values", metric["values"]).reshape(-1)
    check_finite(reducer, "values", values)
    weights = numeric_array(reducer, "weights", metric["weights"])
    if weights.size != values.size:
        raise ValueError(
            f"{reducer}: `weights` has shape {weights.shape} ({weights.size} elements) "
            f"but `values` has {values.size} elements; expected one weight per value "
            "(inputs are flattened)."
        )
    return values, check_weights(reducer, weights, values.size)


def binary_labels(reducer: str, labels: np.ndarray) -> np.ndarray:
    """Checks that labels are 0/1 (or bool) and returns them as bool.

    Raises:
        ValueError: If any label is neither 0 nor 1.
    """
    if labels.dtype == np.bool_:
        return labels
    # For integers, two reductions prove the labels binary without temporaries.
    if labels.dtype.kind in "iu" and (labels.size == 0 or (labels.min() >= 0 and labels.max() <= 1)):
        return labels.astype(bool)
    invalid = (labels != 0) & (labels != 1)
    if np.any(invalid):
        found = np.unique(labels[invalid])[:5].tolist()
        raise ValueError(f"{reducer}: `labels` must be binary (0/1 or bool). Found other values, e.g. {found}.")
    return labels == 1


def class_ids(reducer: str, key: str, values: np.ndarray, num_classes: int) -> np.ndarray:
    """Checks that values are whole numbers in ``[0, num_classes)``.

    Returns:
        The values as int64.

    Raises:
        ValueError: If a value is not a valid class id.
    """
    if values.dtype.kind == "f":
        invalid = (values != np.floor(values)) | (values < 0) | (values >= num_classes)
    else:
        invalid = (values < 0) | (values >= num_classes)
    if np.any(invalid):
        found = np.unique(values[invalid])[:5].tolist()
        raise ValueError(
            f"{reducer}: `{key}` must be class ids, whole numbers in "
            f"[0, {num_classes}). Found other values, e.g. {found}."
        )
    return values.astype(np.int64)


def check_probabilities(reducer: str, key: str, values: np.ndarray) -> None:
    """Checks that values lie in [0, 1].

    Raises:
        ValueError: If a value lies outside [0, 1].
    """
    outside = int(np.count_nonzero((values < 0) | (values > 1)))
    if outside:
        raise ValueError(
            f"{reducer}: `{key}` must be probabilities in [0, 1]; {outside} value(s) "
            "lie outside. Pass logits with the logits option instead."
        )


def gather_states(reducer: str, states: Iterable[Any], state_type: type) -> list[Any]:
    """Validates the states passed to ``cross_slot_reduce``.

    ``None`` entries stand for workers that never called ``accumulate`` and are
    skipped.

    Args:
        reducer: Reducer name, for error messages.
        states: The per-worker states.
        state_type: Type every non-None state must have.

    Returns:
        The non-None states.

    Raises:
        ValueError: If no state is left.
        TypeError: If a state has the wrong type.
    """
    kept = [state for state in states if state is not None]
    if not kept:
        raise ValueError(
            f"{reducer}: cross_slot_reduce received no states, so there are no examples to compute the metric from."
        )
    for state in kept:
        if not isinstance(state, state_type):
            raise TypeError(
                f"{reducer}: expected states of type {state_type.__name__} as returned "
                f"by {reducer}.accumulate(). Received: {type(state).__name__}."
            )
    return kept
