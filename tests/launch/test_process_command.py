"""launcher.process_command: what a run of a command on its slots starts, with Horovod and without it."""

import sys
from pathlib import Path

import pytest

from det_estimator import launcher
from det_estimator.launcher import HostSlots, _launch

SCRIPT = [sys.executable, "train.py"]


@pytest.fixture
def without_horovod(monkeypatch, tmp_path):
    monkeypatch.setattr(_launch, "_horovodrun", lambda: tmp_path / "no-horovodrun")


@pytest.fixture
def with_horovod(monkeypatch, tmp_path):
    horovodrun = tmp_path / "horovodrun"
    horovodrun.write_text("")
    monkeypatch.setattr(_launch, "_horovodrun", lambda: horovodrun)
    return horovodrun


def test_one_slot_here_runs_the_command_itself(without_horovod):
    assert launcher.process_command(SCRIPT, 1, None) == SCRIPT


def test_a_script_on_several_slots_runs_under_horovodrun_where_horovod_is(with_horovod):
    assert launcher.process_command(SCRIPT, 2, None) == [
        str(with_horovod),
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        *SCRIPT,
    ]


def test_without_horovod_a_script_on_several_slots_runs_under_the_tensorflow_launcher(without_horovod):
    tensorflow = [sys.executable, "-m", "det_estimator.launch.tensorflow"]
    assert launcher.process_command(SCRIPT, 2, None) == [*tensorflow, "--slots", "2", "--", *SCRIPT]
    hosts = [HostSlots("localhost", 1), HostSlots("10.0.0.2", 2)]
    assert launcher.process_command(SCRIPT, 3, hosts) == [
        *tensorflow,
        "--hosts",
        "localhost:1,10.0.0.2:2",
        "--",
        *SCRIPT,
    ]
    # A command that launches itself is left as it is.
    own = [sys.executable, "-m", "det_estimator.launch.tensorflow", "--", *SCRIPT]
    assert launcher.process_command(own, 2, None) == own


def test_without_horovod_the_worker_of_a_trial_class_runs_under_the_tensorflow_launcher(without_horovod):
    tensorflow = [sys.executable, "-m", "det_estimator.launch.tensorflow"]
    worker = launcher.worker_command()
    assert launcher.process_command(worker, 2, None) == [*tensorflow, "--slots", "2", "--", *worker]


def test_the_worker_of_a_trial_class_runs_under_horovodrun_where_horovod_is(with_horovod):
    worker = launcher.worker_command()
    assert launcher.process_command(worker, 2, None) == [
        str(with_horovod),
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        *worker,
    ]


def test_horovodrun_is_looked_for_beside_the_interpreter():
    assert _launch._horovodrun() == Path(sys.executable).with_name("horovodrun")
