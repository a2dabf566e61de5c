"""Arrays of keys that the ranking reducers write their examples into, reused once nothing refers to them.

Memory a process has never written costs a page fault for each 4 KiB page on its first
write: for the 4 KiB of keys of a batch of 1,024 examples, more than keying the batch
(1 to 2 us here, the kernel zeroing and mapping a fresh page). An array that an earlier
evaluation wrote, and that nothing refers to any longer, is already mapped: the pool
hands it out again instead of allocating a new one.

Nothing refers to an array when the pool holds its only reference: NumPy makes every view
(a slice, ``reshape``, ``np.frombuffer``) and every buffer exported from it (a
``memoryview``, the native kernels while they work) hold a reference to the array that
owns the memory. A state or a reducer still holding its keys in any form therefore keeps
them out of the pool's reach.
"""

import os
import sys
import threading

import numpy as np

# At most this many bytes of arrays are kept for reuse (64 MiB: the keys of 16.7M examples,
# an evaluation of that size costs no page fault from the second on). Larger ones are allocated
# as usual, and freed with their last reference.
_POOL_BYTES = 64 << 20
# How many pooled arrays a request looks at before allocating: a pool whose arrays are all in
# use (during the first large evaluation) must not cost a scan of all of them per array.
_LOOKS = 8


def _references(arrays: list[np.ndarray], index: int) -> int:
    return sys.getrefcount(arrays[index])


# What _references counts for an array that only the list holds (the count depends on the
# interpreter, so it is measured with the same call).
_UNREFERENCED = _references([np.empty(1, np.int32)], 0)


class _KeyArrayPool:
    """The int32 key arrays of a process's ranking reducers, handed out again once unreferenced.

    Thread-safe: reducers in TensorFlow's ``py_func`` run on several threads.
    """

    def __init__(self) -> None:
        self._arrays: list[np.ndarray] = []
        self._bytes = 0
        self._next = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """An int32 array of ``size`` elements, of unspecified values; a pooled one if one is free."""
        with self._lock:
            arrays = self._arrays
            for _ in range(min(len(arrays), _LOOKS)):
                index = self._next = (self._next + 1) % len(arrays)
                if len(arrays[index]) == size and _references(arrays, index) == _UNREFERENCED:
                    return arrays[index]
            array = np.empty(size, np.int32)
            if self._bytes + array.nbytes <= _POOL_BYTES:
                arrays.append(array)
                self._bytes += array.nbytes
            return array

    def _after_fork_in_child(self) -> None:
        # A thread of the parent may have held the lock when it forked: the child has no such thread.
        self._lock = threading.Lock()


key_arrays = _KeyArrayPool()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=key_arrays._after_fork_in_child)
