"""Hyperparameter search: deterministic state machines that decide which trials run and for how long.

Pure Python: no TensorFlow, no store, no processes. The orchestrator builds a
search method from the experiment config, carries out the operations it
returns (Create, ValidateAfter, Close, Shutdown), reports each trial's events
back, and saves :meth:`SearchMethod.state_dict` after every event::

    from det_estimator.searcher import make_search_method

    method = make_search_method(config)
    ops = method.initial_operations()
    ...
    ops = method.on_validation_completed(request_id, metric, length)

The same config (experiment seed included) and the same events give the same
operations, in a new search and in one resumed from a saved state.
"""

from det_estimator.searcher._asha import AdaptiveASHASearch, Rung, asha_rungs
from det_estimator.searcher._base import SearcherError, SearchMethod
from det_estimator.searcher._grid import GridSearch
from det_estimator.searcher._operations import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Shutdown,
    ValidateAfter,
    operation_from_dict,
)
from det_estimator.searcher._random import RandomSearch
from det_estimator.searcher._registry import make_search_method
from det_estimator.searcher._single import SingleSearch
from det_estimator.searcher._tpe import TPESearch

__all__ = [
    "AdaptiveASHASearch",
    "Close",
    "Create",
    "ExitedReason",
    "GridSearch",
    "Operation",
    "RandomSearch",
    "Rung",
    "SearchMethod",
    "SearcherError",
    "Shutdown",
    "SingleSearch",
    "TPESearch",
    "ValidateAfter",
    "asha_rungs",
    "make_search_method",
    "operation_from_dict",
]
