"""The pool of key arrays: a ranking reducer's chunks are reused once nothing refers to them, and only then."""

import gc
import os
import signal

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from det_estimator.reducers import RocAuc, _chunk_pool, _roc_auc
from det_estimator.reducers import _ranking as ranking

CHUNK = 64  # examples per chunk here, so that a few batches fill several


@pytest.fixture
def pool(monkeypatch):
    """A pool of its own, with small chunks; only with the native kernels, which key batches into chunks."""
    if ranking.kernels is None:
        pytest.skip("the native ranking kernels are not built (test_ranking_kernels.py fails for that)")
    fresh = _chunk_pool._KeyArrayPool()
    monkeypatch.setattr(_roc_auc, "key_arrays", fresh)
    monkeypatch.setattr(_roc_auc, "_CHUNK_EXAMPLES", CHUNK)
    return fresh


def batches(seed, count=10, size=16):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        labels = (rng.random(size) < 0.4).astype(np.int64)
        yield {"labels": labels, "predictions": np.round(rng.random(size), 1).astype(np.float32)}


def data(seed):
    """All the labels and scores of ``batches(seed)``."""
    every = list(batches(seed))
    return np.concatenate([batch["labels"] for batch in every]), np.concatenate([b["predictions"] for b in every])


def accumulated(reducer, seed):
    state = None
    for batch in batches(seed):
        state = reducer.accumulate(batch)
    return state


def keys_in(state):
    return [part.keys for part in state._parts()]


def test_a_later_reducer_writes_into_the_chunks_of_one_nothing_refers_to(pool):
    reducer = RocAuc()
    accumulated(reducer, 0)
    first = [id(array) for array in pool._arrays]
    assert len(first) == 3  # 160 examples in chunks of 64
    del reducer
    gc.collect()
    later = RocAuc()
    state = accumulated(later, 1)
    assert [id(array) for array in pool._arrays] == first  # no new array
    assert {id(keys.base) for keys in keys_in(state)} <= set(first)


def test_chunks_that_a_state_or_a_view_still_refers_to_are_not_handed_out_again(pool):
    # Each way of holding on to a reducer's examples, kept while later reducers take chunks.
    ways = [
        lambda state: state,
        lambda state: keys_in(state)[0][3:],  # a slice of its keys
        memoryview,  # a buffer exported from them (of the state's first part)
        lambda state: np.frombuffer(keys_in(state)[0], np.int32),  # an array over their memory
    ]
    held = []
    for seed, way in enumerate(ways * 3):
        reducer = RocAuc()
        state = accumulated(reducer, seed)
        holder = way(keys_in(state)[0]) if way is memoryview else way(state)
        expected = roc_auc_score(*data(seed)) if holder is state else np.array(holder).copy()
        held.append((holder, expected))
        del reducer, state, holder
        gc.collect()
        accumulated(RocAuc(), 100 + seed)  # takes every chunk that is free
    for holder, expected in held:
        if hasattr(holder, "_parts"):
            assert float(RocAuc().cross_slot_reduce([holder])) == pytest.approx(expected, rel=0, abs=1e-12)
        else:
            assert np.array_equal(np.array(holder), expected)
    assert len(pool._arrays) > 3  # chunks were reused and others allocated


def test_the_pool_keeps_at_most_its_bytes_and_allocates_the_rest(pool, monkeypatch):
    monkeypatch.setattr(_chunk_pool, "_POOL_BYTES", 2 * CHUNK * 4)
    reducer = RocAuc()
    state = accumulated(reducer, 0)  # 3 chunks, 2 of them pooled
    assert len(pool._arrays) == 2
    assert float(reducer.cross_slot_reduce([state])) == pytest.approx(roc_auc_score(*data(0)), rel=0, abs=1e-12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_process_forked_while_another_thread_takes_an_array_takes_arrays_too():
    pool = _chunk_pool.key_arrays
    with pool._lock:  # as a thread of the parent taking an array when the process forks
        child = os.fork()
        if child == 0:
            signal.alarm(20)  # a child stuck on the lock its parent held is killed, and fails the test
            pool.take(CHUNK)
            os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
