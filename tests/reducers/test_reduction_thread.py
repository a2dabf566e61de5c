"""Reductions run on one long-lived thread, with NumPy's huge-page advice off, and behave
as if called directly: same value, same errors, also in a forked child."""

import multiprocessing
import subprocess
import sys
import threading

import numpy as np
import pytest

from det_estimator.reducers import MetricReducer
from det_estimator.reducers._accumulator import MetricAccumulator, MetricReductionError
from det_estimator.reducers._reduction_thread import _set_madvise_hugepage, run_reduction


def test_numpys_advice_switch_is_found_without_a_deprecation_warning():
    # On NumPy 2, numpy.core is a shim that warns: an error where warnings are, as under
    # `python -W error` or a test suite's filterwarnings.
    found = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            "from det_estimator.reducers import _reduction_thread as r; print(r._set_madvise_hugepage is not None)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0 and found.stdout.strip() == "True", found.stderr


class RecordsWhereItRuns(MetricReducer):
    """Sums its batches; records the thread and the huge-page advice its reduction saw."""

    seen: list = []

    def accumulate(self, metric):
        self.total = getattr(self, "total", 0.0) + float(np.sum(metric))
        return self.total

    def cross_slot_reduce(self, per_slot_metrics):
        advice = _set_madvise_hugepage(False)
        _set_madvise_hugepage(advice)
        RecordsWhereItRuns.seen.append((threading.get_ident(), advice))
        return sum(per_slot_metrics)


def reduce_once(values) -> float:
    accumulator = MetricAccumulator(RecordsWhereItRuns(), "total")
    for value in values:
        accumulator.accumulate(np.array([value]))
    return accumulator.reduce_local()


def test_every_reduction_runs_on_one_other_thread_without_huge_page_advice():
    RecordsWhereItRuns.seen = []
    advice_before = _set_madvise_hugepage(True)
    try:
        results = [reduce_once([1.0, 2.0]), reduce_once([3.0])]
        # Reductions started from several threads at once, as concurrent value ops do.
        callers = [threading.Thread(target=reduce_once, args=([float(i)],)) for i in range(4)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(timeout=30)
        advice_after = _set_madvise_hugepage(advice_before)
    finally:
        _set_madvise_hugepage(advice_before)
    assert results == [3.0, 3.0]
    threads = {thread for thread, _ in RecordsWhereItRuns.seen}
    assert len(RecordsWhereItRuns.seen) == 6
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert not any(advice for _, advice in RecordsWhereItRuns.seen)
    assert advice_after is True  # restored for the rest of the process


def test_an_error_in_the_reduction_is_raised_in_the_caller():
    def fails():
        raise ValueError("no positives")

    with pytest.raises(ValueError, match="no positives"):
        run_reduction(fails)

    class FailingReducer(RecordsWhereItRuns):
        def cross_slot_reduce(self, per_slot_metrics):
            raise ZeroDivisionError("empty class")

    accumulator = MetricAccumulator(FailingReducer(), "auc")
    accumulator.accumulate(np.array([1.0]))
    with pytest.raises(MetricReductionError, match="(?s)failed in cross_slot_reduce.*empty class"):
        accumulator.reduce_local()


def _reduce_in_child(queue) -> None:
    queue.put(reduce_once([2.0, 5.0]))


@pytest.mark.timeout(60)
def test_a_forked_child_reduces_on_a_thread_of_its_own():
    reduce_once([1.0])  # the parent's reduction thread exists before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_reduce_in_child, args=(queue,), daemon=True)
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the child hung or failed: it waited for the parent's thread"
    assert queue.get(timeout=5) == 7.0
