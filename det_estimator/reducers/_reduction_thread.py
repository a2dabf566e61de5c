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
import importlib
import os
import threading
from typing import Any, Callable, Optional, TypeVar


def _advice_switch() -> Optional[Callable[[bool], bool]]:
    """NumPy's switch of the advice, private in every version, or None if it has none.

    In ``numpy._core`` since NumPy 2 (and 1.26), in ``numpy.core`` before: NumPy 2 keeps
    that only as a shim that warns, which is an error where warnings are (``python -W error``).
    Without the switch the advice stays on.
    """
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            switch: Callable[[bool], bool] = importlib.import_module(module)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
        return switch
    return None


_set_madvise_hugepage = _advice_switch()

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
