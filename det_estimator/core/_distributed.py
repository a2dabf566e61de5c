"""DistributedContext: who this process is in the job, and collectives of Python objects."""

import json
import os
from typing import Any, Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator.core import _devices
from det_estimator.core._transport import Star

# The reference system's default port, for processes started by hand without DET_CHIEF_PORT.
_DEFAULT_PORT = 12360

# The multi-process contexts of this process that are open, latest last: see current_context().
_open_contexts: list["DistributedContext"] = []


def current_context() -> Optional["DistributedContext"]:
    """The context of the job this process is in, when one of several processes is open; None otherwise.

    For the code that Keras itself calls and that cannot be handed a context: a
    ``ReducerMetric`` read under a ``tf.distribute`` strategy of several workers
    exchanges its state through it.
    """
    return _open_contexts[-1] if _open_contexts else None


class DistributedContext:
    """This process's place in a job of one or more processes, and collectives of Python objects.

    ``rank`` is the process's index in the whole job, ``local_rank`` its index on its
    machine and ``cross_rank`` the index of its machine; the ``*_size`` arguments count
    the same things. The collectives (:meth:`allgather`, :meth:`gather`,
    :meth:`broadcast` and their ``_local`` forms) take any picklable object and must be
    called by every process concerned, in the same order; processes that call different
    ones at the same point raise ``CollectiveMismatchError``, naming both calls, instead
    of waiting for each other forever. They are for coordination
    (metrics, decisions, small states), not a replacement for the framework's own
    collectives on tensors.

    The collectives travel over TCP through the chief: a job of several processes
    connects when the context is built, so every process must build its context at
    about the same time. On one machine the chief is reached at ``127.0.0.1``; across
    machines ``chief_ip`` (or the ``DET_CHIEF_IP`` variable that det-estimator's
    launchers set) must name an address of the chief's machine that the others reach.

    Args:
        rank: index of this process in the job.
        size: number of processes in the job.
        local_rank: index of this process on its machine.
        local_size: number of processes on this machine.
        cross_rank: index of this machine in the job.
        cross_size: number of machines in the job.
        chief_ip: the chief's address; required when ``cross_size > 1`` unless
            ``DET_CHIEF_IP`` is set.
        pub_port: the port the chief listens on when ``DET_CHIEF_PORT`` is not set
            (det-estimator's launchers always set it to a free port); ``port_offset`` is
            added to it.
        pull_port: accepted for compatibility with the reference system; unused (one
            port serves both directions).
        port_offset: added to ``pub_port``, so that several jobs started by hand on one
            machine do not collide.
        force_tcp: accepted for compatibility; unused (the collectives always use TCP).

    Raises:
        ValueError: a size is below 1, a rank is outside ``[0, size)``, or
            ``cross_size > 1`` without a chief address.
        PeerGoneError: the other processes did not connect in time.
    """

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        chief_ip: Optional[str] = None,
        pub_port: int = _DEFAULT_PORT,
        pull_port: int = _DEFAULT_PORT + 16,
        port_offset: int = 0,
        force_tcp: bool = False,
    ) -> None:
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
        self._global = Star(0, 1, ("", 0))
        self._local = self._global
        if size > 1:
            self._connect(chief_ip or os.environ.get(environment_variables.CHIEF_IP), pub_port + port_offset)
            _open_contexts.append(self)

    def _connect(self, chief_ip: Optional[str], default_port: int) -> None:
        if self.cross_size > 1 and not chief_ip:
            raise ValueError(
                f"A job on {self.cross_size} machines needs the chief's address: pass chief_ip= or set "
                f"{environment_variables.CHIEF_IP}. Received: chief_ip=None"
            )
        port = int(os.environ.get(environment_variables.CHIEF_PORT, default_port))
        address = (chief_ip if self.cross_size > 1 and chief_ip else "127.0.0.1", port)
        self._global = Star(self.rank, self.size, address, listen_host="" if self.cross_size > 1 else None)
        if self.local_size == self.size:
            self._local = self._global
        elif self.local_size > 1:
            self._local = self._local_star()

    def _local_star(self) -> Star:
        """A star of this machine's processes around its local chief, found through the global one."""
        hub = None
        if self.local_rank == 0:
            hub, address = Star.hub_listening(self.local_size)
        else:
            address = None
        announced = self._global.allgather((self.cross_rank, address))
        if hub is not None:
            hub.wait_for_members()
            return hub
        (address,) = [found for machine, found in announced if machine == self.cross_rank and found]
        return Star(self.local_rank, self.local_size, tuple(address))

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: Optional[str] = None) -> "DistributedContext":
        """The context of this process in a Horovod job, read from ``hvd``.

        Args:
            hvd: an initialized Horovod module (``horovod.tensorflow``,
                ``horovod.tensorflow.keras``, ...); its ``rank()``, ``size()`` and the
                like describe this process.
            chief_ip: the chief's address, needed across machines (default: the
                ``DET_CHIEF_IP`` variable).

        Example:
            ::

                import horovod.tensorflow as hvd
                hvd.init()
                distributed = det.core.DistributedContext.from_horovod(hvd)
        """
        return cls(
            rank=hvd.rank(),
            size=hvd.size(),
            local_rank=hvd.local_rank(),
            local_size=hvd.local_size(),
            cross_rank=hvd.cross_rank(),
            cross_size=hvd.cross_size(),
            chief_ip=chief_ip,
        )

    @classmethod
    def from_tf_config(cls) -> tuple["DistributedContext", Any]:
        """The context of this process and a ``tf.distribute`` strategy, from ``TF_CONFIG``.

        Under ``python -m det_estimator.launch.tensorflow`` with several slots, every
        process is one worker of a ``tf.distribute.MultiWorkerMirroredStrategy``: its
        rank is its ``TF_CONFIG`` task index, its local and cross ranks say where the
        launcher placed it, and worker 0 is the chief. Several workers on one machine
        each see only the GPU of their local rank. With a ``TF_CONFIG`` not written by
        det-estimator's launcher, each worker counts as a machine of its own. On one
        process it returns a single-process context and TensorFlow's default strategy (a
        ``MirroredStrategy`` when several GPUs are visible).

        Create it first in the script, before building the model: TensorFlow requires
        the strategy to exist before any other TensorFlow work.

        Returns:
            ``(distributed, strategy)``.
        """
        import tensorflow as tf

        workers, index = _tf_config_workers()
        if len(workers) > 1:
            local_rank, local_size, cross_rank, cross_size = _machine_placement(index, len(workers))
            if local_size > 1:
                # Otherwise every worker on this machine would use all of its GPUs.
                _devices.pin_local_gpu(local_rank)
            distributed = cls(
                rank=index,
                size=len(workers),
                local_rank=local_rank,
                local_size=local_size,
                cross_rank=cross_rank,
                cross_size=cross_size,
                chief_ip=os.environ.get(environment_variables.CHIEF_IP) or workers[0].rsplit(":", 1)[0],
            )
            return distributed, tf.distribute.MultiWorkerMirroredStrategy()
        gpus = tf.config.list_physical_devices("GPU")
        strategy = tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
        return DummyDistributedContext(), strategy

    @classmethod
    def from_environment(cls) -> "DistributedContext":
        """The context described by the variables horovodrun or ``TF_CONFIG`` give this process.

        Used by ``core.init()`` when a script launched on several slots passes no
        ``distributed``: horovodrun's ``HOROVOD_RANK``, ``HOROVOD_SIZE``, ... variables, or
        the worker list of ``TF_CONFIG``; a single-process context when there are none.
        """
        if "HOROVOD_SIZE" in os.environ:
            read = lambda name: int(os.environ[f"HOROVOD_{name}"])  # noqa: E731
            return cls(
                rank=read("RANK"),
                size=read("SIZE"),
                local_rank=read("LOCAL_RANK"),
                local_size=read("LOCAL_SIZE"),
                cross_rank=read("CROSS_RANK"),
                cross_size=read("CROSS_SIZE"),
            )
        workers, index = _tf_config_workers()
        if len(workers) > 1:
            local_rank, local_size, cross_rank, cross_size = _machine_placement(index, len(workers))
            return cls(
                rank=index,
                size=len(workers),
                local_rank=local_rank,
                local_size=local_size,
                cross_rank=cross_rank,
                cross_size=cross_size,
                chief_ip=os.environ.get(environment_variables.CHIEF_IP) or workers[0].rsplit(":", 1)[0],
            )
        return DummyDistributedContext()

    def get_rank(self) -> int:
        """Index of this process in the job (0 is the chief)."""
        return self.rank

    def get_local_rank(self) -> int:
        """Index of this process on its machine."""
        return self.local_rank

    def get_size(self) -> int:
        """Number of processes in the job."""
        return self.size

    def get_local_size(self) -> int:
        """Number of processes of the job on this machine."""
        return self.local_size

    def get_cross_rank(self) -> int:
        """Index of this process's machine in the job."""
        return self.cross_rank

    def get_cross_size(self) -> int:
        """Number of machines in the job."""
        return self.cross_size

    def get_num_agents(self) -> int:
        """Number of machines in the job (the reference system's name for :meth:`get_cross_size`)."""
        return self.cross_size

    def allgather(self, stuff: Any) -> list[Any]:
        """Every process's ``stuff``, in rank order, on every process."""
        return self._global.allgather(stuff)

    def gather(self, stuff: Any) -> Optional[list[Any]]:
        """Every process's ``stuff`` in rank order on the chief (rank 0); None elsewhere."""
        return self._global.gather(stuff)

    def broadcast(self, stuff: Any = None) -> Any:
        """The chief's ``stuff``, on every process (the others' arguments are ignored)."""
        return self._global.broadcast(stuff)

    def allgather_local(self, stuff: Any) -> list[Any]:
        """The ``stuff`` of every process on this machine, in local-rank order, on each of them."""
        return self._local.allgather(stuff)

    def gather_local(self, stuff: Any) -> Optional[list[Any]]:
        """This machine's processes' ``stuff`` on its local chief (local rank 0); None elsewhere."""
        return self._local.gather(stuff)

    def broadcast_local(self, stuff: Any = None) -> Any:
        """The local chief's ``stuff``, on every process of its machine."""
        return self._local.broadcast(stuff)

    def close(self) -> None:
        """Closes the connections to the other processes; the collectives work no more."""
        if self in _open_contexts:
            _open_contexts.remove(self)
        if self._local is not self._global:
            self._local.close()
        self._global.close()

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, cross_rank={self.cross_rank}, cross_size={self.cross_size})"
        )


class DummyDistributedContext(DistributedContext):
    """The context of a job of one process: every collective returns what one participant would."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)


def _machine_placement(rank: int, size: int) -> tuple[int, int, int, int]:
    """``(local_rank, local_size, cross_rank, cross_size)`` of the ``TF_CONFIG`` worker ``rank``.

    det-estimator's TensorFlow launcher says where each worker runs (``DET_LOCAL_RANK``
    and the like, for the same rank and size); a ``TF_CONFIG`` written by hand does not,
    and each worker then counts as a machine of its own.
    """
    variables = (
        environment_variables.RANK,
        environment_variables.SIZE,
        environment_variables.LOCAL_RANK,
        environment_variables.LOCAL_SIZE,
        environment_variables.CROSS_RANK,
        environment_variables.CROSS_SIZE,
    )
    try:
        launched = [int(os.environ[variable]) for variable in variables]
    except (KeyError, ValueError):
        return 0, 1, rank, size
    if launched[:2] != [rank, size]:
        return 0, 1, rank, size
    local_rank, local_size, cross_rank, cross_size = launched[2:]
    return local_rank, local_size, cross_rank, cross_size


def tf_config_workers() -> int:
    """How many workers ``TF_CONFIG`` lists (0 without it); read without joining them."""
    return len(_tf_config_workers()[0])


def _tf_config_workers() -> tuple[list[str], int]:
    """The worker addresses of ``TF_CONFIG`` and this process's index among them (none: ``([], 0)``).

    A ``chief`` task (TensorFlow's other way of naming worker 0) comes first; the
    ``worker`` tasks follow it. det-estimator's launcher writes workers only.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return [], 0
    config = json.loads(raw)
    cluster, task = config.get("cluster", {}), config.get("task", {})
    chiefs = list(cluster.get("chief", []))
    workers = chiefs + list(cluster.get("worker", []))
    index = int(task.get("index", 0))
    return workers, index if task.get("type", "worker") == "chief" else index + len(chiefs)
