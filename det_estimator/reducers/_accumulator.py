"""One metric's life in one evaluation on one rank, without any TensorFlow.

A :class:`MetricAccumulator` feeds batches to a private copy of the user's reducer,
packs what this rank ends with (its state, "saw no batch", or the error it hit) into an
envelope that can cross the network, and reduces the envelopes of all ranks. Errors
travel as data rather than being raised mid-evaluation, so a reducer that fails on one
rank makes every rank fail with the same message instead of leaving the others waiting
in a collective.
"""

import copy
import pickle
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from det_estimator import _root_cause
from det_estimator._root_cause import RootCause
from det_estimator.errors import DetEstimatorError
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer
from det_estimator.reducers._function_reducer import FunctionReducer
from det_estimator.reducers._reduction_thread import run_reduction

# Envelope kinds: what one rank contributes to a reduction.
_STATE = "state"
_NO_BATCH = "no-batch"
_ERROR = "error"

Envelope = tuple[str, Any]
# A reducer's failure: what the error message says, and its root cause for the command to show.
_Failure = tuple[str, RootCause]


class MetricReductionError(DetEstimatorError, RuntimeError):
    """A reducer failed, or could not run, on some rank of a distributed evaluation."""


class MetricAccumulator:
    """Accumulates one metric on this rank and reduces it across ranks.

    The user's reducer is never mutated: every evaluation works on a ``copy.deepcopy`` of
    it, taken when the accumulator is created and again after each reduction. A reducer
    instance created once and handed to every evaluation therefore always starts from the
    state its constructor left.

    Args:
        reducer: the user's reducer, used as the prototype of each evaluation's copy.
        name: how error messages refer to this metric.
        rank: this process's rank, for error messages.

    Raises:
        TypeError: ``copy.deepcopy`` cannot copy the reducer.
    """

    def __init__(self, reducer: MetricReducer, name: str, rank: int = 0):
        self.name = name
        self._prototype = reducer
        self._rank = rank
        try:
            self._start_evaluation()
        except Exception as error:
            # copy.deepcopy's own message ("cannot pickle '_thread.lock' object") names
            # neither the reducer nor why it is copied at all.
            raise TypeError(
                f"Every evaluation works on a copy.deepcopy of the reducer, and {type(reducer).__name__} cannot be "
                f"copied: {error}. Create what it cannot copy (a lock, a session, an open file) in accumulate(), "
                "or give the class a __deepcopy__ method."
            ) from error

    def _start_evaluation(self) -> None:
        self._reducer = copy.deepcopy(self._prototype)
        self._state: Any = None
        self._batches = 0
        self._error: Optional[_Failure] = None

    def accumulate(self, batch: Any) -> int:
        """Feeds one batch to the reducer; returns the number of batches seen so far.

        An exception from the reducer is recorded, not raised: it is reported by every
        rank once all ranks have exchanged their outcomes.
        """
        if self._error is None:
            try:
                self._state = self._reducer.accumulate(batch)
                self._batches += 1
            except Exception:
                self._error = self._failure("accumulate")
        return self._batches

    def local_envelope(self) -> Envelope:
        """What this rank contributes to the reduction."""
        if self._error is not None:
            return (_ERROR, self._error)
        if self._batches == 0:
            return (_NO_BATCH, None)
        return (_STATE, self._state)

    def encode(self) -> bytes:
        """This rank's envelope as bytes, ready for an allgather."""
        try:
            return pickle.dumps(self.local_envelope(), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return pickle.dumps((_ERROR, self._failure("pickling the state returned by accumulate")))

    def reduce_encoded(self, all_bytes: np.ndarray, sizes: np.ndarray, dtype: Optional[np.dtype] = None) -> Any:
        """Reduces the gathered envelopes of all ranks (concatenated bytes and their lengths)."""
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        # Unpickled from views of the gathered bytes: a copy of every rank's bytes first would add
        # as much memory again as all the states take (4 bytes per example of RocAuc).
        buffers = [all_bytes[start:end].data for start, end in zip(offsets[:-1], offsets[1:])]
        return self.reduce([pickle.loads(buffer) for buffer in buffers], dtype)

    def reduce_local(self, dtype: Optional[np.dtype] = None) -> Any:
        """Reduces this rank's own state: the whole evaluation when there is one process."""
        return self.reduce([self.local_envelope()], dtype)

    def reduce(self, envelopes: Sequence[Envelope], dtype: Optional[np.dtype] = None) -> Any:
        """Calls ``cross_slot_reduce`` on the states of the ranks that saw a batch.

        It runs on the process's reduction thread (see ``_reduction_thread``). The
        accumulator then starts a fresh evaluation, whatever the outcome.

        Args:
            envelopes: every rank's envelope, in rank order.
            dtype: when given, the value is returned as a NumPy array of this dtype.

        Raises:
            MetricReductionError: a rank's reducer failed, no rank saw a batch,
                ``cross_slot_reduce`` raised, or its value is None or cannot be
                converted to ``dtype``.
        """
        try:
            value = run_reduction(self._reduce, envelopes)
            return value if dtype is None else self._as_array(value, dtype)
        finally:
            self._start_evaluation()

    def _as_array(self, value: Any, dtype: np.dtype) -> np.ndarray:
        """``cross_slot_reduce``'s value as an array of ``dtype``; an error naming the metric if it cannot be one."""
        # np.asarray(None, dtype=float) is NaN: a cross_slot_reduce (or reducer function)
        # that forgot its return statement would pass for a metric that is undefined.
        if value is None:
            problem = "returned None instead of the metric's value (is a return statement missing?)"
        else:
            try:
                return np.asarray(value, dtype=dtype)
            except (TypeError, ValueError) as error:
                problem = f"returned {value!r}, which cannot be converted to {np.dtype(dtype)}: {error}"
        if isinstance(self._reducer, FunctionReducer):
            call = f"the reducer function {getattr(self._reducer.fn, '__name__', self._reducer.fn)!s}"
        else:
            call = f"{type(self._reducer).__name__}.cross_slot_reduce"
        message = f"Metric {self.name!r}: {call} {problem}"
        kind = MetricReductionError.__name__
        _root_cause.note(RootCause(self._rank, kind, message, f"{kind}: {message}", f"metric {self.name!r} ({call})"))
        raise MetricReductionError(message)

    def _reduce(self, envelopes: Sequence[Envelope]) -> Any:
        for kind, payload in envelopes:
            if kind == _ERROR:
                self._raise(payload)
        states: list[Any] = [payload for kind, payload in envelopes if kind == _STATE]
        if not states:
            raise MetricReductionError(
                f"Metric {self.name!r}: no rank evaluated a single batch, so there is nothing to reduce. "
                "Check that the validation input_fn yields data on at least one rank."
            )
        try:
            with validation.reducing_metric(self.name):
                return self._reducer.cross_slot_reduce(states)
        except Exception:
            failure = self._failure("cross_slot_reduce")
        self._raise(failure)

    def _failure(self, during: str) -> _Failure:
        """The reducer's exception being handled now, with the user's frames, as data that can cross ranks."""
        reducer = type(self._reducer).__name__
        method = during if during in ("accumulate", "cross_slot_reduce") else "accumulate"
        cause = _root_cause.cause_of_current_exception(self._rank, f"metric {self.name!r} ({reducer}.{method})")
        return (f"Metric {self.name!r}: the reducer {reducer} failed in {during} on rank {self._rank}", cause)

    @staticmethod
    def _raise(failure: _Failure) -> None:
        """Raises a rank's reducer failure here, noting it as the cause of whatever the failure ends."""
        description, cause = failure
        _root_cause.note(cause)
        raise MetricReductionError(f"{description}:\n{cause.traceback}")
