"""One process that plays one rank of a job of two, for tests that need no second process.

:class:`OneRankOfTwo` is a DistributedContext of ``size`` 2 whose collectives answer at
once, as if the other rank had sent what this one sent (or what the test says it sent).
:func:`play_one_rank_of_two` makes a trial run in the caller's process (``run_trial`` on
one slot) run as that rank, with Horovod's gradient averaging and variable broadcast
standing in as what they are on ranks that agree: the optimizer itself and no broadcast.
It is for what a rank decides alone (refusing a trial before it trains, say); anything
that needs the other rank's real data needs two processes.
"""

from typing import Any, Optional

import pytest
import tensorflow as tf

from det_estimator import _horovod, core


class OneRankOfTwo(core.DummyDistributedContext):
    """Rank ``rank`` of a job of two processes on one machine, played by this process alone.

    Args:
        rank: the rank played.
        other: what the other rank contributes to every collective (default: the same
            as this rank).
    """

    _UNSET = object()

    def __init__(self, rank: int = 0, other: Any = _UNSET) -> None:
        super().__init__()
        self.rank = self.local_rank = rank
        self.size = self.local_size = 2
        self._other = other

    def allgather(self, stuff: Any) -> list[Any]:
        everything = [stuff, stuff if self._other is self._UNSET else self._other]
        return everything if self.rank == 0 else everything[::-1]

    def gather(self, stuff: Any) -> Optional[list[Any]]:
        return self.allgather(stuff) if self.rank == 0 else None

    def broadcast(self, stuff: Any = None) -> Any:
        return self.allgather(stuff)[0]

    allgather_local, gather_local, broadcast_local = allgather, gather, broadcast


def play_one_rank_of_two(monkeypatch: pytest.MonkeyPatch, rank: int = 0) -> None:
    """Makes the next in-process runs (``run_trial`` on one slot) run as rank ``rank`` of two."""
    monkeypatch.setattr(core, "DummyDistributedContext", lambda: OneRankOfTwo(rank))
    monkeypatch.setattr(_horovod, "distributed_optimizer", lambda optimizer, **_: optimizer)
    monkeypatch.setattr(_horovod, "keras_distributed_optimizer", lambda optimizer, **_: optimizer)
    monkeypatch.setattr(_horovod, "broadcast_variables_hook", lambda root_rank=0: tf.estimator.SessionRunHook())
