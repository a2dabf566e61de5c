"""DistributedContext: one process, and real processes exchanging objects over its TCP star."""

import json
import multiprocessing
import os
import time

import pytest

from det_estimator import core
from det_estimator.core import _transport
from det_estimator.launcher import free_port

# Processes are forked from the test process: fast, and they inherit the imports.
_FORK = multiprocessing.get_context("fork")


def test_one_process_describes_itself_and_every_collective_has_one_participant():
    context = core.DummyDistributedContext()
    assert (context.get_rank(), context.get_size(), context.get_local_rank(), context.get_local_size()) == (0, 1, 0, 1)
    assert (context.get_cross_rank(), context.get_cross_size(), context.get_num_agents()) == (0, 1, 1)
    assert context.allgather({"a": 1}) == [{"a": 1}]
    assert context.allgather_local(2) == [2]
    assert context.gather(3) == [3]
    assert context.gather_local(4) == [4]
    assert context.broadcast(5) == 5
    assert context.broadcast_local(6) == 6
    assert context.broadcast_local() is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rank": 2}, r"Argument `rank` must be in \[0, 2\).*Received: rank=2, size=2"),
        ({"size": 0, "rank": 0}, r"Argument `rank` must be in \[0, 0\)"),
        ({"local_rank": -1}, r"Argument `local_rank` must be in \[0, 2\).*local_rank=-1"),
        ({"cross_rank": 1}, r"Argument `cross_rank` must be in \[0, 1\)"),
    ],
)
def test_inconsistent_ranks_are_rejected(overrides, message):
    arguments = {"rank": 0, "size": 2, "local_rank": 0, "local_size": 2, "cross_rank": 0, "cross_size": 1}
    with pytest.raises(ValueError, match=message):
        core.DistributedContext(**{**arguments, **overrides})


def test_ranks_are_keyword_only_as_in_the_reference():
    with pytest.raises(TypeError):
        core.DistributedContext(0, 1, 0, 1, 0, 1)


def test_several_machines_need_the_chiefs_address(monkeypatch):
    monkeypatch.delenv("DET_CHIEF_IP", raising=False)
    with pytest.raises(ValueError, match="A job on 2 machines needs the chief's address: pass chief_ip="):
        core.DistributedContext(rank=1, size=2, local_rank=0, local_size=1, cross_rank=1, cross_size=2)


def test_from_horovod_reads_the_module_it_is_given():
    class FakeHorovod:
        """Stands for horovod.tensorflow (or horovod.keras): one process."""

        rank = local_rank = cross_rank = staticmethod(lambda: 0)
        size = local_size = cross_size = staticmethod(lambda: 1)

    context = core.DistributedContext.from_horovod(FakeHorovod)
    assert (context.rank, context.size, context.local_size, context.cross_size) == (0, 1, 1, 1)


def test_from_environment_reads_horovodruns_variables_or_tf_config(monkeypatch):
    for name in ("HOROVOD_SIZE", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert core.DistributedContext.from_environment().size == 1
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
    )
    assert core.DistributedContext.from_environment().size == 1
    for name, value in {
        "RANK": 0,
        "SIZE": 1,
        "LOCAL_RANK": 0,
        "LOCAL_SIZE": 1,
        "CROSS_RANK": 0,
        "CROSS_SIZE": 1,
    }.items():
        monkeypatch.setenv(f"HOROVOD_{name}", str(value))
    context = core.DistributedContext.from_environment()
    assert (context.rank, context.size) == (0, 1)


def test_from_tf_config_gives_the_default_strategy_on_one_process(monkeypatch):
    import tensorflow as tf

    monkeypatch.delenv("TF_CONFIG", raising=False)
    distributed, strategy = core.DistributedContext.from_tf_config()
    assert distributed.size == 1
    assert strategy is tf.distribute.get_strategy()


def _collectives(rank: int, layout: dict, port: int, results) -> None:
    """One process of a job laid out as ``layout`` (machines of ``local_size`` processes)."""
    os.environ["DET_CHIEF_PORT"] = str(port)
    local_size, size = layout["local_size"], layout["size"]
    context = core.DistributedContext(
        rank=rank,
        size=size,
        local_rank=rank % local_size,
        local_size=local_size,
        cross_rank=rank // local_size,
        cross_size=size // local_size,
        chief_ip="127.0.0.1",
    )
    results.put(
        (
            rank,
            {
                "allgather": context.allgather({"rank": rank}),
                "gather": context.gather(rank * 10),
                "broadcast": context.broadcast(f"from {rank}"),
                "allgather_local": context.allgather_local(rank),
                "gather_local": context.gather_local(rank),
                "broadcast_local": context.broadcast_local(f"local chief {rank}"),
                "large": len(context.allgather(bytes(3_000_000))[0]),
            },
        )
    )
    context.close()


@pytest.mark.parametrize("layout", [{"size": 2, "local_size": 2}, {"size": 4, "local_size": 2}], ids=["1x2", "2x2"])
def test_collectives_on_real_processes_on_one_and_two_machines(layout):
    results = _FORK.Queue()
    port = free_port()
    processes = [
        _FORK.Process(target=_collectives, args=(rank, layout, port, results)) for rank in range(layout["size"])
    ]
    for process in processes:
        process.start()
    reports = dict(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0

    size, local_size = layout["size"], layout["local_size"]
    for rank, report in reports.items():
        machine = rank // local_size
        local_chief = machine * local_size
        assert report["allgather"] == [{"rank": r} for r in range(size)]
        assert report["gather"] == ([r * 10 for r in range(size)] if rank == 0 else None)
        assert report["broadcast"] == "from 0"
        assert report["allgather_local"] == list(range(local_chief, local_chief + local_size))
        assert report["gather_local"] == (report["allgather_local"] if rank == local_chief else None)
        assert report["broadcast_local"] == f"local chief {local_chief}"
        assert report["large"] == 3_000_000


def _dies_or_waits(rank: int, port: int, results) -> None:
    os.environ["DET_CHIEF_PORT"] = str(port)
    context = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1)
    if rank == 1:
        os._exit(3)  # dies before the collective, as a killed process would
    started = time.monotonic()
    try:
        context.allgather("waiting")
        results.put(("returned", 0.0))
    except core.PeerGoneError as error:
        results.put((str(error), time.monotonic() - started))


def test_a_process_that_dies_makes_its_peers_collective_fail_fast():
    results = _FORK.Queue()
    port = free_port()
    processes = [_FORK.Process(target=_dies_or_waits, args=(rank, port, results)) for rank in range(2)]
    for process in processes:
        process.start()
    message, waited = results.get(timeout=60)
    for process in processes:
        process.join(timeout=30)
    assert "process 1 closed its connection in the middle of a collective" in message
    assert waited < 10


def _mismatched(rank: int, port: int, results) -> None:
    os.environ["DET_CHIEF_PORT"] = str(port)
    context = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1)
    try:
        if rank == 0:
            context.allgather("should_preempt, say")
        else:
            context.broadcast()  # the next searcher operation, say: it skipped the chief's allgather
        results.put((rank, "returned"))
    except (core.CollectiveMismatchError, core.PeerGoneError) as error:
        results.put((rank, f"{type(error).__name__}: {error}"))
    finally:
        context.close()


def test_processes_in_different_collectives_fail_at_once_naming_both_calls():
    # Without the check the chief waits for an allgather message and the other process for
    # the chief's broadcast: both wait forever.
    results = _FORK.Queue()
    port = free_port()
    processes = [_FORK.Process(target=_mismatched, args=(rank, port, results)) for rank in range(2)]
    for process in processes:
        process.start()
    try:
        reported = dict(results.get(timeout=30) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=5)
            process.kill()
    assert reported[0].startswith(
        "CollectiveMismatchError: The job's processes called different collectives at the same point: the chief "
        "called allgather from allgather() at test_distributed.py:"
    )
    assert "process 1 called broadcast from broadcast() at test_distributed.py:" in reported[0]
    assert reported[1].startswith("PeerGoneError: the chief closed its connection")


def _reset_by_chief(rank: int, port: int, results) -> None:
    os.environ["DET_CHIEF_PORT"] = str(port)
    context = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1)
    if rank == 0:
        time.sleep(1)  # the other's messages arrive, unread: closing now resets its connection
        context.close()
        return
    try:
        context.gather("unread")
        context.allgather("unread too")
        results.put("returned")
    except Exception as error:  # noqa: BLE001 -- the test reports which error it was
        results.put(f"{type(error).__name__}: {error}")


def test_a_connection_reset_by_a_peer_that_ended_is_a_peer_gone_error():
    results = _FORK.Queue()
    port = free_port()
    processes = [_FORK.Process(target=_reset_by_chief, args=(rank, port, results)) for rank in range(2)]
    for process in processes:
        process.start()
    reported = results.get(timeout=60)
    for process in processes:
        process.join(timeout=30)
    assert reported.startswith("PeerGoneError: the chief closed its connection in the middle of a collective")


def test_a_process_that_never_starts_is_reported_after_the_rendezvous_timeout(monkeypatch):
    monkeypatch.setenv("DET_CHIEF_PORT", str(free_port()))
    monkeypatch.setattr(_transport, "_RENDEZVOUS_SECONDS", 0.5)
    with pytest.raises(core.PeerGoneError, match=r"Processes \[1\] of the job never connected to the chief"):
        core.DistributedContext(rank=0, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1)


class _FakeTensorFlowConfig:
    """Records which GPU ``pin_local_gpu`` makes visible, on a machine with ``gpus`` GPUs."""

    def __init__(self, monkeypatch, gpus: int) -> None:
        import tensorflow as tf

        self.visible, self.growing = [], []
        self.gpus = [f"GPU:{index}" for index in range(gpus)]
        monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: self.gpus if kind == "GPU" else [])
        monkeypatch.setattr(tf.config, "set_visible_devices", lambda device, kind=None: self.visible.append(device))
        monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda device, on: self.growing.append(device))


@pytest.mark.parametrize(("local_rank", "gpus", "pinned"), [(0, 2, "GPU:0"), (1, 2, "GPU:1"), (3, 2, "GPU:1")])
def test_each_process_sees_only_its_local_ranks_gpu(monkeypatch, local_rank, gpus, pinned):
    from det_estimator.core._devices import pin_local_gpu

    fake = _FakeTensorFlowConfig(monkeypatch, gpus)
    pin_local_gpu(local_rank)
    assert fake.visible == [pinned] and fake.growing == [pinned]


def test_without_gpus_nothing_is_pinned(monkeypatch):
    from det_estimator.core._devices import pin_local_gpu

    fake = _FakeTensorFlowConfig(monkeypatch, 0)
    pin_local_gpu(1)
    assert fake.visible == [] and fake.growing == []
