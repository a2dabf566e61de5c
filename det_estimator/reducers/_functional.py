"""The math behind the built-in reducers, as pure functions of NumPy arrays.

The reducer classes are thin stateful wrappers: they validate batches, keep
small mergeable states and call these functions to turn merged states into
metric values. Nothing here validates its inputs; callers pass clean arrays.
"""

import math
from typing import Optional

import numpy as np


def bin_counts(scores: np.ndarray, edges: np.ndarray, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Histogram of scores over the ``len(edges) + 1`` bins that edges delimit.

    Bin 0 holds scores below ``edges[0]``, bin ``i`` scores in
    ``[edges[i - 1], edges[i])`` and the last bin scores ``>= edges[-1]``.

    Args:
        scores: 1-D scores.
        edges: Strictly increasing 1-D bin edges.
        weights: Per-score weights, or None to count.

    Returns:
        int64 counts, or float64 sums of weights.
    """
    bins = np.searchsorted(edges, scores, "right")
    counts = np.bincount(bins, weights=weights, minlength=len(edges) + 1)
    return counts if weights is not None else counts.astype(np.int64, copy=False)


def binned_roc_auc(positive_counts: np.ndarray, negative_counts: np.ndarray) -> tuple[float, float]:
    """Approximate ROC AUC from per-bin histograms of each class.

    Pairs in different bins are ordered by their bins; pairs in the same bin
    get half credit. As the exact credit of a same-bin pair lies in [0, 1], the
    returned bound ``0.5 * sum_b pos_b * neg_b / (P * N)`` is a rigorous upper
    bound on the difference to the exact AUC.

    Args:
        positive_counts: Per-bin counts (or weights) of the positives.
        negative_counts: Per-bin counts (or weights) of the negatives.

    Returns:
        ``(auc, error_bound)``, both NaN if a class is empty.
    """
    pos = np.asarray(positive_counts, dtype=np.float64)
    neg = np.asarray(negative_counts, dtype=np.float64)
    pairs = pos.sum() * neg.sum()
    if pairs == 0:
        return math.nan, math.nan
    negatives_below = np.cumsum(neg) - neg
    same_bin = float(np.dot(pos, neg))
    auc = (float(np.dot(pos, negatives_below)) + 0.5 * same_bin) / pairs
    return auc, 0.5 * same_bin / pairs


def confusion_matrix(
    labels: np.ndarray, predicted: np.ndarray, num_classes: int, weights: Optional[np.ndarray] = None
) -> np.ndarray:
    """Confusion matrix, rows indexed by true class and columns by predicted class.

    Args:
        labels: int64 true class ids in ``[0, num_classes)``.
        predicted: int64 predicted class ids in ``[0, num_classes)``.
        num_classes: Number of classes.
        weights: Per-example weights, or None to count.

    Returns:
        ``[num_classes, num_classes]`` int64 counts, or float64 sums of weights.
    """
    counts = np.bincount(labels * num_classes + predicted, weights=weights, minlength=num_classes * num_classes)
    if weights is None:
        counts = counts.astype(np.int64, copy=False)
    return counts.reshape(num_classes, num_classes)


def _safe_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Divides elementwise, giving 0 where the denominator is 0 (zero_division=0)."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def precision_recall_f1(matrix: np.ndarray, average: str) -> tuple[float, float, float]:
    """Precision, recall and F1 from a confusion matrix.

    Args:
        matrix: Confusion matrix (rows: true class, columns: predicted class).
        average: "binary" (class 1 of a 2-class matrix), "micro" (global
            counts) or "macro" (unweighted mean over all classes, including
            classes that never occur). A ratio with a zero denominator is 0, as
            with sklearn's ``zero_division=0``.

    Returns:
        ``(precision, recall, f1)``.
    """
    true_pos = np.diag(matrix).astype(np.float64)
    predicted = matrix.sum(axis=0)
    actual = matrix.sum(axis=1)
    if average == "binary":
        true_pos, predicted, actual = true_pos[1:2], predicted[1:2], actual[1:2]
    elif average == "micro":
        true_pos, predicted, actual = (
            true_pos.sum(keepdims=True),
            predicted.sum(keepdims=True),
            actual.sum(keepdims=True),
        )
    precision = _safe_ratio(true_pos, predicted)
    recall = _safe_ratio(true_pos, actual)
    # 2 tp / (2 tp + fp + fn), sklearn's formulation, with fp + fn = predicted + actual - 2 tp.
    f1 = _safe_ratio(2 * true_pos, predicted + actual)
    return float(precision.mean()), float(recall.mean()), float(f1.mean())


def accuracy(matrix: np.ndarray) -> float:
    """Fraction (or weight fraction) of examples on the confusion matrix diagonal."""
    return float(np.trace(matrix) / matrix.sum())


def log_loss_terms(
    labels: np.ndarray, predictions: np.ndarray, *, from_logits: bool = False, eps: Optional[float] = None
) -> np.ndarray:
    """Per-example binary cross-entropy, in float64.

    Args:
        labels: bool labels.
        predictions: Probabilities of the positive class in [0, 1], or logits.
        from_logits: Whether predictions are logits. Logits use the stable
            ``max(x, 0) - x * y + log1p(exp(-|x|))`` and need no clipping.
        eps: Probabilities are clipped to ``[eps, 1 - eps]``; None uses the
            machine epsilon of the predictions' dtype, as sklearn's log_loss.

    Returns:
        float64 losses, one per example.
    """
    if from_logits:
        x = predictions.astype(np.float64)
        return np.maximum(x, 0.0) - x * labels + np.log1p(np.exp(-np.abs(x)))
    if eps is None:
        eps = float(np.finfo(predictions.dtype if predictions.dtype.kind == "f" else np.float64).eps)
    p = np.clip(predictions.astype(np.float64), eps, 1.0 - eps)
    return -np.where(labels, np.log(p), np.log1p(-p))


def weighted_moments(values: np.ndarray, weights: Optional[np.ndarray] = None) -> tuple[float, float, float]:
    """Total weight, weighted mean and weighted sum of squared deviations.

    Args:
        values: 1-D values.
        weights: Per-value weights, or None for ones.

    Returns:
        ``(sum_w, mean, m2)``, with ``m2 = sum w * (v - mean)**2``; all 0 if the
        total weight is 0.
    """
    values = values.astype(np.float64, copy=False)
    total = float(len(values)) if weights is None else float(np.sum(weights, dtype=np.float64))
    if total == 0:
        return 0.0, 0.0, 0.0
    if values.min() == values.max():
        # Constant values: an exact zero spread, which averaging could blur by
        # an ulp (R2 treats a zero total sum of squares specially).
        return total, float(values[0]), 0.0
    mean = float(np.average(values, weights=weights))
    deviations = values - mean
    squared = deviations * deviations
    m2 = float(squared.sum() if weights is None else np.dot(weights.astype(np.float64, copy=False), squared))
    return total, mean, m2


def merge_moments(a: tuple[float, float, float], b: tuple[float, float, float]) -> tuple[float, float, float]:
    """Merges two ``(sum_w, mean, m2)`` triples (Chan et al.'s parallel update).

    Merging centered moments avoids the cancellation of ``sum w*y**2 -
    (sum w*y)**2 / sum w`` when the mean is large compared to the spread.

    Returns:
        The ``(sum_w, mean, m2)`` of the union.
    """
    weight_a, mean_a, m2_a = a
    weight_b, mean_b, m2_b = b
    total = weight_a + weight_b
    if weight_a == 0 or weight_b == 0:
        return b if weight_a == 0 else a
    delta = mean_b - mean_a
    mean = mean_a + delta * (weight_b / total)
    return total, mean, m2_a + m2_b + delta * delta * (weight_a * weight_b / total)


def r2_from_sums(residual_sum_of_squares: float, total_sum_of_squares: float) -> float:
    """Coefficient of determination ``1 - SS_res / SS_tot``.

    Constant labels (``SS_tot == 0``) give 1.0 for perfect predictions and 0.0
    otherwise, as sklearn's r2_score with ``force_finite=True``.
    """
    if total_sum_of_squares == 0:
        return 1.0 if residual_sum_of_squares == 0 else 0.0
    return 1.0 - residual_sum_of_squares / total_sum_of_squares
