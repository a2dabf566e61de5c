"""python -m det_estimator.launch.tensorflow / .horovod: TF_CONFIG, failures, signals, one slot, the cluster info."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from det_estimator import _info
from det_estimator.launcher import HostSlots, parse_hosts, resolve_slots

TIMEOUT = 120

# Prints what a launched process sees, as one JSON line.
SHOW = textwrap.dedent(
    """
    import json, os, sys
    names = ["TF_CONFIG", "DET_CHIEF_IP", "DET_CHIEF_PORT", "DET_CROSS_RANK", "DET_RANK", "DET_SIZE"]
    print("SEEN " + json.dumps({"argv": sys.argv[1:], **{name: os.environ.get(name) for name in names}}))
    """
)


def launch(tmp_path: Path, script: str, *options: str, args=(), env=None, engine="tensorflow", timeout=TIMEOUT):
    path = tmp_path / "script.py"
    path.write_text(script)
    command = [sys.executable, "-m", f"det_estimator.launch.{engine}", *options, "--", "python3", str(path), *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=tmp_path
    )


def seen(output: str) -> list[dict]:
    return [json.loads(line.split("SEEN ", 1)[1]) for line in output.splitlines() if "SEEN " in line]


def test_two_slots_get_one_tf_config_each_naming_every_worker(tmp_path):
    result = launch(tmp_path, SHOW, "--slots", "2", args=("a", "b c"))
    assert result.returncode == 0, result.stdout + result.stderr
    views = sorted(seen(result.stdout), key=lambda view: json.loads(view["TF_CONFIG"])["task"]["index"])
    assert len(views) == 2
    configs = [json.loads(view["TF_CONFIG"]) for view in views]
    workers = configs[0]["cluster"]["worker"]
    assert len(workers) == 2 and len(set(workers)) == 2
    assert all(worker.startswith("localhost:") for worker in workers)
    for rank, (view, config) in enumerate(zip(views, configs)):
        assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        assert (view["DET_RANK"], view["DET_SIZE"], view["argv"]) == (str(rank), "2", ["a", "b c"])
        assert f"[{rank}] SEEN" in result.stdout
    # One chief address and port for det-estimator's object collectives, the same for both.
    assert {(view["DET_CHIEF_IP"], view["DET_CHIEF_PORT"]) for view in views} == {
        ("127.0.0.1", views[0]["DET_CHIEF_PORT"])
    }


def test_one_slot_runs_the_command_itself_without_tf_config(tmp_path):
    script = SHOW + "sys.exit(5)\n"
    result = launch(tmp_path, script, args=("x",), env={"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}}'})
    assert result.returncode == 5
    (view,) = seen(result.stdout)
    assert view["TF_CONFIG"] is None and view["argv"] == ["x"] and view["DET_RANK"] is None
    assert "[0]" not in result.stdout


@pytest.mark.parametrize("how, status", [("sys.exit(3)", 3), ("os.kill(os.getpid(), signal.SIGKILL)", 128 + 9)])
def test_a_failing_process_ends_the_job_at_once_with_its_status(tmp_path, how, status):
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        if index == 1:
            time.sleep(0.5)
            {how}
        time.sleep(600)  # the other process would wait forever
        """
    )
    started = time.monotonic()
    result = launch(tmp_path, script, "--slots", "2", timeout=60)
    assert result.returncode == status, result.stdout + result.stderr
    assert "process 1 exited with status" in result.stdout
    assert time.monotonic() - started < 60  # the timeout above would have fired first


def test_sigterm_reaches_every_process(tmp_path):
    script = textwrap.dedent(
        """
        import json, os, signal, sys, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        signal.signal(signal.SIGTERM, lambda *_: (print(f"terminated {index}", flush=True), sys.exit(0)))
        print(f"ready {index}", flush=True)
        time.sleep(600)
        """
    )
    path = tmp_path / "script.py"
    path.write_text(script)
    process = subprocess.Popen(
        [sys.executable, "-m", "det_estimator.launch.tensorflow", "--slots", "2", "--", "python3", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ready = 0
        for line in process.stdout:
            ready += "ready" in line
            if ready == 2:
                break
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert "[0] terminated 0" in output and "[1] terminated 1" in output


def test_launched_by_an_experiment_it_takes_the_slots_of_the_cluster_info(tmp_path):
    info = _info.ClusterInfo(
        task_type=_info.TRIAL_TASK,
        trial=None,
        latest_checkpoint=None,
        user_data={},
        store_path=str(tmp_path / "store.sqlite"),
        checkpoint_dir=str(tmp_path),
        slots=2,
    )
    info.write(tmp_path / "info.json")
    env = {_info.INFO_VARIABLE: str(tmp_path / "info.json"), "DET_CHIEF_PORT": "45678"}
    result = launch(tmp_path, SHOW, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    views = seen(result.stdout)
    assert len(views) == 2 and {view["DET_CHIEF_PORT"] for view in views} == {"45678"}
    # --slots wins over the info.
    assert len(seen(launch(tmp_path, SHOW, "--slots", "1", env=env).stdout)) == 1


def test_from_tf_config_gives_a_multi_worker_strategy_on_two_processes(tmp_path):
    script = textwrap.dedent(
        """
        import json
        import tensorflow as tf
        import det_estimator as det
        from det_estimator.core import _devices

        pinned = []
        _devices.pin_local_gpu = pinned.append  # this machine has no GPU: record the request
        distributed, strategy = det.core.DistributedContext.from_tf_config()
        total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(distributed.rank + 1))), axis=None)
        print("SEEN " + json.dumps({
            "rank": distributed.rank, "size": distributed.size,
            "mwms": isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
            "replicas": strategy.num_replicas_in_sync, "sum": float(total),
            "gathered": distributed.allgather(distributed.rank),
            "local": [distributed.local_rank, distributed.local_size, distributed.cross_rank, distributed.cross_size],
            "local_broadcast": distributed.broadcast_local(distributed.rank),
            "pinned": pinned,
        }))
        """
    )
    result = launch(tmp_path, script, "--slots", "2", env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    views = sorted(seen(result.stdout), key=lambda view: view["rank"])
    assert [(v["rank"], v["size"], v["replicas"], v["sum"], v["gathered"]) for v in views] == [
        (0, 2, 2, 3.0, [0, 1]),
        (1, 2, 2, 3.0, [0, 1]),
    ]
    assert all(view["mwms"] for view in views)
    # Both workers on this machine: local ranks 0 and 1, one GPU each.
    assert [(v["local"], v["local_broadcast"], v["pinned"]) for v in views] == [
        ([0, 2, 0, 1], 0, [0]),
        ([1, 2, 0, 1], 0, [1]),
    ]

    alone = launch(tmp_path, script, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert alone.returncode == 0, alone.stderr[-3000:]
    (view,) = seen(alone.stdout)
    assert (view["rank"], view["size"], view["replicas"], view["sum"]) == (0, 1, 1, 1.0)
    assert view["pinned"] == []
    assert not view["mwms"]


@pytest.mark.horovod
def test_the_horovod_launcher_runs_the_command_under_horovodrun(tmp_path):
    script = textwrap.dedent(
        """
        import json, os
        names = ["HOROVOD_RANK", "HOROVOD_SIZE", "DET_CHIEF_PORT"]
        print("SEEN " + json.dumps({name: os.environ.get(name) for name in names}))
        """
    )
    result = launch(tmp_path, script, "--slots", "2", engine="horovod")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    views = seen(result.stdout)
    assert sorted(view["HOROVOD_RANK"] for view in views) == ["0", "1"]
    assert {view["HOROVOD_SIZE"] for view in views} == {"2"}
    assert len({view["DET_CHIEF_PORT"] for view in views}) == 1

    failing = launch(
        tmp_path,
        "import os, sys\nsys.exit(4 if os.environ['HOROVOD_RANK'] == '1' else 0)\n",
        "--slots",
        "2",
        engine="horovod",
    )
    assert failing.returncode != 0


def test_a_worker_on_this_machine_is_listed_at_an_address_the_other_hosts_reach():
    from det_estimator.launch.tensorflow import tf_config_processes

    def workers(entries):
        (first, *_) = tf_config_processes(["python3", "train.py"], entries)
        return json.loads(first.env["TF_CONFIG"])["cluster"]["worker"]

    assert all(worker.startswith("localhost:") for worker in workers([HostSlots("localhost", 2)]))
    # TEST-NET-2 (RFC 5737): another host.
    here, there = workers([HostSlots("localhost", 1), HostSlots("198.51.100.7", 1)])
    assert there == "198.51.100.7:12400"
    address = here.rsplit(":", 1)[0]
    assert address != "localhost" and not address.startswith("127.")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))  # an address of this machine


def test_a_process_on_another_host_runs_this_interpreter_for_python():
    from det_estimator.launcher import ProcessSpec
    from det_estimator.launcher._job import _ssh_command

    # Every host has the same environment at the same path; the `python3` first on the
    # remote PATH of a non-login ssh shell is usually the system's, without TensorFlow.
    ssh = _ssh_command(ProcessSpec(1, "other", ["python3", "train.py", "--x"], {"A": "1"}), "/work dir", {"A": "1"})
    assert ssh[-2] == "other"
    assert ssh[-1].endswith(f"A=1 {sys.executable} train.py --x") and ssh[-1].startswith("cd '/work dir' && ")


def test_a_process_on_another_host_gets_the_environment_a_local_one_gets():
    from det_estimator.launcher import ProcessSpec
    from det_estimator.launcher._job import _ssh_command

    # As horovodrun does: the launcher's variables (the run's cluster info, the config's
    # environment variables) reach the remote process, but for shell functions, the previous
    # directory and this machine's GPUs.
    launcher_env = {
        "DET_CLUSTER_INFO": "/shared/run info.json",
        "TF_CONFIG": "{}",
        "OLDPWD": "/elsewhere",
        "BASH_FUNC_module%%": "() { :; }",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    spec = ProcessSpec(1, "other", ["python3", "train.py"], {"TF_CONFIG": "{}"}, unset=("HOROVOD_RANK",))
    remote = _ssh_command(spec, "/work", launcher_env)[-1]
    assert "DET_CLUSTER_INFO='/shared/run info.json'" in remote and "TF_CONFIG='{}'" in remote
    assert "OLDPWD" not in remote and "BASH_FUNC" not in remote and "CUDA_VISIBLE_DEVICES" not in remote
    assert "env -u HOROVOD_RANK " in remote


def test_hosts_and_slots_resolution():
    assert parse_hosts("a:2,b") == [HostSlots("a", 2), HostSlots("b", 1)]
    with pytest.raises(ValueError, match="host:slots entries separated by commas, not 'a:0'"):
        parse_hosts("a:0")
    assert resolve_slots(None, parse_hosts("a:2,b:1"), 8, ["x"]) == [HostSlots("a", 2), HostSlots("b", 1)]
    assert resolve_slots(3, None, 8, ["x"]) == [HostSlots("localhost", 3)]
    assert resolve_slots(None, None, 3, ["x", "y"]) == [HostSlots("x", 2), HostSlots("y", 1)]
    assert resolve_slots(None, None, None, ()) == [HostSlots("localhost", 1)]
    with pytest.raises(ValueError, match="Argument `--slots`"):
        resolve_slots(2, parse_hosts("a:3"), None, ())


@pytest.mark.parametrize(
    "task, index", [({"type": "chief", "index": 0}, 0), ({"type": "worker", "index": 1}, 2), ({"index": 1}, 2)]
)
def test_a_tf_config_with_a_chief_task_counts_the_chief_as_worker_zero(monkeypatch, task, index):
    from det_estimator.core._distributed import _tf_config_workers

    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
    assert _tf_config_workers() == (["c:1", "w:1", "w:2"], index)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 1}}))
    assert _tf_config_workers() == (["a:1", "b:2"], 1)


# A Core API script with no experiment: every process reports; the chief records the run.
CORE_SCRIPT = textwrap.dedent(
    """
    import det_estimator as det

    with det.core.init() as core_context:
        rank = core_context.distributed.rank
        gathered = core_context.distributed.allgather(rank)
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": float(sum(gathered))})
        print(f"RANK {rank} OF {core_context.distributed.size} EXPERIMENT {core_context.info.trial.experiment_id}")
    """
)


def test_a_core_script_launched_by_hand_on_two_slots_records_one_experiment(tmp_path):
    from det_estimator.store import ExperimentStore, MetricKind

    store_path = tmp_path / "store.sqlite"
    result = launch(tmp_path, CORE_SCRIPT, "--slots", "2", env={"DET_ESTIMATOR_STORE": str(store_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RANK 0 OF 2 EXPERIMENT 1" in result.stdout and "RANK 1 OF 2 EXPERIMENT 1" in result.stdout
    with ExperimentStore(store_path) as store:
        (experiment,) = store.experiments()  # one, not one per process
        assert (experiment.state, experiment.slots) == ("COMPLETED", 2)
        (trial,) = store.trials(experiment.id)
        (report,) = store.metrics(trial.id, MetricKind.TRAINING)
        assert report.metrics == {"loss": 1.0}  # 0 + 1: both ranks took part


# As the Iris example does: det.get_cluster_info() on every process of a script run by hand.
INFO_SCRIPT = textwrap.dedent(
    """
    import det_estimator as det

    with det.core.init(config={"name": "by hand", "hyperparameters": {"lr": 0.5}}) as core_context:
        info = det.get_cluster_info()
        print(f"RANK {core_context.distributed.rank} TRIAL {info.trial.trial_id} LR {info.trial.hparams['lr']}")
    print(f"RANK {core_context.distributed.rank} AFTER {det.get_cluster_info()}")
    """
)


def test_every_process_of_a_core_script_run_by_hand_on_two_slots_sees_the_cluster_info(tmp_path):
    result = launch(tmp_path, INFO_SCRIPT, "--slots", "2", env={"DET_ESTIMATOR_STORE": str(tmp_path / "s.sqlite")})
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        assert f"RANK {rank} TRIAL 1 LR 0.5" in result.stdout, result.stdout + result.stderr
        assert f"RANK {rank} AFTER None" in result.stdout  # only while the run lasts
