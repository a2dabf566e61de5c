"""Runs every reduction on one long-lived thread, with NumPy's huge-page advice off.

A reduction (``cross_slot_reduce``, often a scikit-learn call on all of an evaluation's
values) runs inside a TensorFlow ``py_func``, on whichever of TensorFlow's threads picks
it up. Two things made the same call slower there than on the main thread, all of the
difference in system time (scikit-learn's ``roc_auc_score`` of 1M values: 0.27-0.33 s
against 0.22 s):

* A thread that seldom allocates has a malloc arena that kept none of the last large
  temporaries, so nearly every page of every temporary faults afresh (10,000-20,000
  faults per call). One thread that does all reductions keeps its arena warm: mostly
  fewer than 2,000 faults.
* NumPy advises the kernel to back every array of 4 MB or more with transparent huge
  pages. Under Linux's default setting (``defrag=madvise``) a fault in such an array may
  wait for the kernel to compact memory. Without the advice the faults that remain are
  cheap; huge pages do little for arrays that one reduction uses once.

With both, the call takes what it takes on the main thread. Reductions run one at a
time: a reduction in Python holds the GIL anyway, and the built-in ones spread their
heavy work over the CPUs themselves.
"""

import concurrent.futures
import os
import threading
from typing import Any, Callable, Optional, TypeVar

try:  # NumPy < 2, the versions supported; without the switch the advice stays on.
    from numpy.core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]  # private: not in the stubs
except ImportError:  # pragma: no cover
    _set_madvise_hugepage = None

Result = TypeVar("Result")

_lock = threading.Lock()
_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
_executor_pid: Optional[int] = None


def run_reduction(function: Callable[..., Result], *args: Any) -> Result:
    """``function(*args)``, run on the reduction thread; its exception is raised here."""
    return _reduction_executor().submit(_without_huge_page_advice, function, *args).result()


def _reduction_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _executor, _executor_pid
    with _lock:
        # A forked child inherits the executor but not its thread: it starts its own.
        if _executor is None or _executor_pid != os.getpid():
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="det-reduction")
            _executor_pid = os.getpid()
        return _executor


def _without_huge_page_advice(function: Callable[..., Result], *args: Any) -> Result:
    if _set_madvise_hugepage is None:
        return function(*args)
    # The switch is process-wide; only this thread ever turns it, so save and restore suffice.
    advice_before = _set_madvise_hugepage(False)
    try:
        return function(*args)
    finally:
        _set_madvise_hugepage(advice_before)
