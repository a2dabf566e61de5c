"""DistributedContext: who this process is in the job, and collectives of Python objects."""

from typing import Any, Optional

from det_estimator import _horovod


class DistributedContext:
    """This process's place in a job of one or more processes, and how to exchange objects.

    ``rank`` is the process's index in the whole job, ``local_rank`` its index on its
    machine, ``cross_rank`` the index of its machine; the ``*_size`` attributes count
    the same things. The collectives take any picklable object and must be called by
    every process of the job, in the same order, outside any TensorFlow graph (they run
    eagerly over Horovod). In a job of one process every collective works and returns
    what it would return with a single participant.

    Args:
        rank: index of this process in the job.
        size: number of processes in the job.
        local_rank: index of this process on its machine.
        local_size: number of processes on this machine.
        cross_rank: index of this machine in the job.
        cross_size: number of machines in the job.

    Raises:
        ValueError: a size is below 1 or a rank is outside ``[0, size)``.
    """

    def __init__(
        self,
        rank: int = 0,
        size: int = 1,
        local_rank: int = 0,
        local_size: int = 1,
        cross_rank: int = 0,
        cross_size: int = 1,
    ):
        for name, index, count in (
            ("rank", rank, size),
            ("local_rank", local_rank, local_size),
            ("cross_rank", cross_rank, cross_size),
        ):
            if count < 1 or not 0 <= index < count:
                raise ValueError(
                    f"Argument `{name}` must be in [0, {count}) and its size at least 1. "
                    f"Received: {name}={index}, size={count}"
                )
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size

    @classmethod
    def from_horovod(cls, hvd: Any = None) -> "DistributedContext":
        """The context of this process in an initialized Horovod job.

        Args:
            hvd: the ``horovod.tensorflow`` module (accepted for compatibility; the
                process's own initialized Horovod is used either way).

        Returns:
            A single-process context when Horovod is not initialized.
        """
        return cls(
            rank=_horovod.rank(),
            size=_horovod.size(),
            local_rank=_horovod.local_rank(),
            local_size=_horovod.local_size(),
            cross_rank=_horovod.cross_rank(),
            cross_size=_horovod.cross_size(),
        )

    def get_rank(self) -> int:
        """Index of this process in the job (0 is the chief)."""
        return self.rank

    def get_local_rank(self) -> int:
        """Index of this process on its machine."""
        return self.local_rank

    def get_size(self) -> int:
        """Number of processes in the job."""
        return self.size

    def get_num_agents(self) -> int:
        """Number of machines in the job."""
        return self.cross_size

    def allgather(self, stuff: Any) -> list[Any]:
        """Every process's ``stuff``, in rank order, on every process."""
        if self.size == 1:
            return [stuff]
        return _horovod.allgather_object(stuff)

    def allgather_local(self, stuff: Any) -> list[Any]:
        """The ``stuff`` of every process on this machine, in local-rank order."""
        if self.size == 1:
            return [stuff]
        tagged = _horovod.allgather_object((self.cross_rank, self.local_rank, stuff))
        return [item for machine, _, item in sorted(tagged, key=lambda t: t[:2]) if machine == self.cross_rank]

    def gather(self, stuff: Any) -> Optional[list[Any]]:
        """Every process's ``stuff`` in rank order on the chief (rank 0); None elsewhere."""
        gathered = self.allgather(stuff)
        return gathered if self.rank == 0 else None

    def gather_local(self, stuff: Any) -> Optional[list[Any]]:
        """This machine's processes' ``stuff`` on its local chief (local rank 0); None elsewhere."""
        gathered = self.allgather_local(stuff)
        return gathered if self.local_rank == 0 else None

    def broadcast(self, stuff: Any) -> Any:
        """The chief's ``stuff``, on every process (the others' arguments are ignored)."""
        if self.size == 1:
            return stuff
        return _horovod.broadcast_object(stuff, root_rank=0)

    def broadcast_local(self, stuff: Any) -> Any:
        """The local chief's ``stuff``, on every process of its machine."""
        if self.size == 1:
            return stuff
        return self.allgather_local(stuff if self.local_rank == 0 else None)[0]

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, cross_rank={self.cross_rank}, cross_size={self.cross_size})"
        )
