"""Approximate ROC AUC from a state of constant size: adaptive cells, or fixed bins."""

import math
from typing import Any, Optional, Union

import numpy as np

from det_estimator.reducers import _cells as cells_math
from det_estimator.reducers import _functional as functional
from det_estimator.reducers import _ranking as ranking
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer
from det_estimator.reducers._cells import Cells

_SCORE_KINDS = ("probabilities", "logits")
_VALUES = ("auc", "error_bound")
# While accumulating, a worker keeps this many times more cells than its state has, and
# merges new examples in batches of at least _CHUNK_EXAMPLES.
_WORKING_CELLS_FACTOR = 4
_CHUNK_EXAMPLES = 1 << 16

BinnedState = tuple[np.ndarray, np.ndarray]


def _validate_edges(bins: Any) -> np.ndarray:
    rule = "an integer >= 3 or a strictly increasing 1-D array of at least 2 finite edges"
    try:
        edges = np.asarray(bins, dtype=np.float64)
    except (TypeError, ValueError):
        raise validation.invalid_argument("bins", rule, bins) from None
    if edges.ndim != 1 or len(edges) < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise validation.invalid_argument("bins", rule, bins)
    return edges


class _CellBuffer:
    """One worker's cells while it accumulates, and the examples not yet merged into them.

    ``cells`` is replaced, never modified, and a full ``pending`` list is replaced rather
    than emptied, so a (cells, list, length) triple taken at any time stays a snapshot.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.cells = cells_math.empty_cells()
        self.pending: list[tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]] = []
        self.pending_examples = 0

    def add(self, keys: np.ndarray, is_positive: np.ndarray, weights: Optional[np.ndarray]) -> None:
        self.pending.append((keys, is_positive, weights))
        self.pending_examples += len(keys)
        if self.pending_examples >= max(_CHUNK_EXAMPLES, self.budget * _WORKING_CELLS_FACTOR):
            self.cells = _merged(self.cells, self.pending, self.budget * _WORKING_CELLS_FACTOR)
            self.pending = []
            self.pending_examples = 0


def _merged(cells: Cells, pending: list[tuple], budget: int) -> Cells:
    """``cells`` with the pending examples added, merged down to ``budget`` cells."""
    if pending:
        keys = np.concatenate([keys for keys, _, _ in pending])
        is_positive = np.concatenate([labels for _, labels, _ in pending])
        weights = None
        if any(w is not None for _, _, w in pending):
            weights = np.concatenate([np.ones(len(k)) if w is None else w for k, _, w in pending])
        cells = cells_math.add_points(cells, cells_math.cells_from_points(keys, is_positive, weights))
    return cells_math.merge_cells(cells, budget)


class ScoreCells:
    """The state of :class:`BinnedRocAuc` with adaptive cells: at most ``bins`` cells.

    A view of the reducer's buffer when returned by ``accumulate``; the cells are
    computed on first use, or when the state is pickled.
    """

    __slots__ = ("_snapshot", "_cells")

    def __init__(self, cells: Cells) -> None:
        self._snapshot: Optional[tuple[Cells, list, int, int]] = None
        self._cells: Optional[Cells] = cells

    @classmethod
    def _view(cls, buffer: _CellBuffer) -> "ScoreCells":
        state = cls.__new__(cls)
        state._snapshot = (buffer.cells, buffer.pending, len(buffer.pending), buffer.budget)
        state._cells = None
        return state

    @property
    def cells(self) -> Cells:
        """The cells, in increasing order of score."""
        if self._cells is None:
            assert self._snapshot is not None  # a view holds its snapshot until its cells are computed
            cells, pending, num_pending, budget = self._snapshot
            self._cells = _merged(cells, pending[:num_pending], budget)
            self._snapshot = None
        return self._cells

    def __reduce__(self) -> tuple[Any, tuple]:
        return _unpickle_cells, tuple(self.cells)

    def __repr__(self) -> str:
        cells = self.cells
        return (
            f"ScoreCells({len(cells.lo)} cells, {cells.positives.sum():g} positive and "
            f"{cells.negatives.sum():g} negative mass)"
        )


def _unpickle_cells(*columns: np.ndarray) -> ScoreCells:
    return ScoreCells(Cells(*columns))


class BinnedRocAuc(MetricReducer):
    """ROC AUC from a state of bounded size, with a rigorous bound on its error.

    With an integer ``bins`` (the default), each worker keeps at most ``bins`` cells
    that adapt to where its scores are: a cell is an interval of scores with the mass
    of each class in it and the credit of the pairs inside it whose order is known.
    While examples arrive, cells of adjacent scores merge (those of one label first,
    then those with the fewest pairs of opposite labels), which keeps every credit
    exact: only an example that falls inside a cell already spanning several scores
    loses its order against that cell's examples; such pairs count one half. Each cell
    also keeps, per label, the mean position of its examples within it. Workers' cells
    merge exactly; a pair in overlapping cells of different workers is credited as if
    each cell's examples of a label were spread around their mean. The result is exact
    as long as no pair of unknown order occurs, for instance while a worker has seen
    fewer distinct scores than ``bins``. Its error is bounded by half the pairs of
    unknown order, plus the distance of the result from counting all of them one half,
    over all pairs.

    ``bins`` may instead be an explicit strictly increasing array of edges, in the
    space of the scores given (e.g. ``np.linspace(0, 1, 201)`` emulates 200 uniform
    probability thresholds): fixed bins, below the first edge, ``[edges[i],
    edges[i + 1])``, and at or above the last. The state is then the two histograms,
    and pairs in the same bin count one half.

    Input per batch: ``{"labels": 0/1 or bool, "predictions": scores,
    "weights": optional, >= 0}``, flattened. Probabilities must lie in [0, 1].

    ``cross_slot_reduce`` returns the approximate AUC as np.float64 (NaN with a
    RuntimeWarning if a single class occurs) and stores in ``last_error_bound`` a
    rigorous bound on its distance to the exact AUC; :meth:`error_bound` computes the
    same bound for any list of states.

    Args:
        bins: Most cells per worker (int >= 3; about 64 bytes each), or explicit edges.
        scores: "probabilities" or "logits": what the predictions are; probabilities
            are checked to lie in [0, 1].
        value: What ``cross_slot_reduce`` returns: "auc", or "error_bound" to
            report the bound as a metric of its own through ``make_metric``
            (which reduces a fresh copy of the reducer, so ``last_error_bound``
            of the instance passed to it stays unset).

    Example:
        >>> reducer = BinnedRocAuc()
        >>> state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.8, 0.3]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def __init__(
        self,
        bins: Union[int, np.ndarray] = 4096,
        scores: str = "probabilities",
        value: str = "auc",
    ) -> None:
        if value not in _VALUES:
            raise validation.invalid_argument("value", f"one of {list(_VALUES)}", value)
        if scores not in _SCORE_KINDS:
            raise validation.invalid_argument("scores", f"one of {list(_SCORE_KINDS)}", scores)
        self.edges: Optional[np.ndarray] = None
        self.budget: Optional[int] = None
        if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
            if bins < 3:
                raise validation.invalid_argument("bins", "an integer >= 3 or a strictly increasing 1-D array", bins)
            self.budget = int(bins)
        else:
            self.edges = _validate_edges(bins)
        self.scores = scores
        self.value = value
        self.last_error_bound: Optional[float] = None
        self.reset()

    @property
    def num_bins(self) -> int:
        """Most cells of a worker's state, or number of fixed bins."""
        if self.edges is not None:
            return len(self.edges) + 1
        assert self.budget is not None  # bins was a number of cells
        return self.budget

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        bins = self.budget if self.edges is None else self.edges.tolist()
        return {"bins": bins, "scores": self.scores, "value": self.value}

    def reset(self) -> None:
        """Forgets all accumulated batches."""
        if self.edges is None:
            self._buffer = _CellBuffer(self.num_bins)
        else:
            self._positive = np.zeros(self.num_bins, dtype=np.int64)
            self._negative = np.zeros(self.num_bins, dtype=np.int64)

    def accumulate(self, metric: Any) -> Union[ScoreCells, BinnedState]:
        """Adds one batch.

        Args:
            metric: ``{"labels", "predictions", "weights" (optional)}``.

        Returns:
            With cells, a :class:`ScoreCells` view of the cells so far. With fixed bins,
            ``(positive_counts, negative_counts)``: copies of the histograms so far,
            int64 counts, or float64 sums of weights once a batch had weights.

        Raises:
            ValueError: On non-binary labels, NaN scores, probabilities outside
                [0, 1], invalid weights or mismatched sizes.
        """
        name = type(self).__name__
        batch = validation.parse_binary_batch(name, metric, allow_inf_predictions=True)
        if self.scores == "probabilities":
            validation.check_probabilities(name, "predictions", batch.predictions)
        if self.edges is not None:
            return self._count_in_bins(batch, self.edges)
        is_positive, predictions, weights = batch
        if weights is not None:
            kept = weights > 0
            is_positive, predictions, weights = is_positive[kept], predictions[kept], weights[kept]
        if len(predictions):
            # One key space for all score dtypes: float64 keys order float32 scores too.
            keys = ranking.order_keys(predictions.astype(np.float64))
            self._buffer.add(keys, is_positive.copy(), weights)
        return ScoreCells._view(self._buffer)

    def _count_in_bins(self, batch: validation.BinaryBatch, edges: np.ndarray) -> BinnedState:
        is_positive, scores, weights = batch
        positive_weights = None if weights is None else weights[is_positive]
        negative_weights = None if weights is None else weights[~is_positive]
        # Adding float64 weight sums to int64 counts promotes the state to float64.
        self._positive = self._positive + functional.bin_counts(scores[is_positive], edges, positive_weights)
        self._negative = self._negative + functional.bin_counts(scores[~is_positive], edges, negative_weights)
        return self._positive.copy(), self._negative.copy()

    def _auc_and_bound(self, per_slot_metrics: list[Any]) -> tuple[float, float]:
        name = type(self).__name__
        if self.edges is None:
            states = validation.gather_states(name, per_slot_metrics, ScoreCells)
            cells = [state.cells for state in states]
            if not any(len(c.lo) for c in cells):
                raise validation.no_examples_error(name)
            return cells_math.cells_auc(cells)
        return functional.binned_roc_auc(*self._merge_histograms(per_slot_metrics))

    def _merge_histograms(self, per_slot_metrics: list[BinnedState]) -> BinnedState:
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, tuple)
        positive = np.zeros(self.num_bins, dtype=np.int64)
        negative = np.zeros(self.num_bins, dtype=np.int64)
        for state in states:
            if len(state) != 2 or any(np.shape(h) != (self.num_bins,) for h in state):
                raise ValueError(
                    f"{name}: expected states (positive_counts, negative_counts) of {self.num_bins} bins each, "
                    "as returned by accumulate() of a reducer with the same bins."
                )
            positive = positive + state[0]
            negative = negative + state[1]
        if positive.sum() == 0 and negative.sum() == 0:
            raise validation.no_examples_error(name)
        return positive, negative

    def error_bound(self, per_slot_metrics: list[Any]) -> np.float64:
        """Upper bound on |binned AUC - exact AUC| for these states.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            Half the mass of the pairs of unknown order, plus how far crediting
            overlapping cells of different workers moved the result from counting
            those pairs one half, over all pairs (with fixed bins,
            ``0.5 * sum_b pos_b * neg_b / (P * N)``); NaN if a class is absent.
        """
        return np.float64(self._auc_and_bound(per_slot_metrics)[1])

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> np.float64:
        """Combines the states of all workers and computes the AUC.

        Also sets ``last_error_bound``.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            The approximate AUC as np.float64 (the error bound with
            ``value="error_bound"``); NaN, with a RuntimeWarning, if only one
            class occurs in the whole evaluation.

        Raises:
            ValueError: If there are no examples at all.
        """
        auc, bound = self._auc_and_bound(per_slot_metrics)
        self.last_error_bound = bound
        if math.isnan(auc):
            name = type(self).__name__
            validation.warn_undefined(
                f"{name}: only one class occurs in the whole evaluation, so {name} is undefined; returning NaN."
            )
        return np.float64(bound if self.value == "error_bound" else auc)
