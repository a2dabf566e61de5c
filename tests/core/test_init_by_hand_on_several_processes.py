"""core.init() of a script run by hand on two real processes, one of which refuses its arguments.

Each process is started on its own, as a user's own launcher (or two shells) would start
them, with nothing to end the other when one fails: every process must fail by itself,
promptly, with the refused argument's message. Every run has a time limit, so that a
process waiting for the others fails its test in a minute instead of hanging.
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from det_estimator import _info
from det_estimator.launcher import free_port
from det_estimator.store import ExperimentStore

TIMEOUT_SECONDS = 60

# Process `refusing` passes a bad argument to det.core.init(); the other passes none.
SCRIPT = textwrap.dedent(
    """
    import os, sys
    import det_estimator as det

    rank = int(os.environ["HOROVOD_RANK"])
    refusing, bad = int(sys.argv[1]), sys.argv[2]
    arguments = {}
    if rank == refusing:
        arguments = {"config": {"name": "by hand", "bogus": 1}} if bad == "config" else {"checkpoint_storage": 5}
    with det.core.init(**arguments) as core_context:
        print("TRAINING ON", rank, flush=True)
    """
)

MESSAGES = {
    "config": "experiment config: unknown key `bogus`",
    "argument": "det.core.init(checkpoint_storage=...) takes the path of a directory",
}


def start_by_hand(tmp_path: Path, refusing: int, bad: str) -> list[subprocess.Popen]:
    """Starts the script as two processes of one job, each on its own, as horovodrun would describe them."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    port = str(free_port())
    processes = []
    for rank in (0, 1):
        ranks = {"RANK": rank, "SIZE": 2, "LOCAL_RANK": rank, "LOCAL_SIZE": 2, "CROSS_RANK": 0, "CROSS_SIZE": 1}
        env = {
            **os.environ,
            **{f"HOROVOD_{name}": str(value) for name, value in ranks.items()},
            "DET_CHIEF_PORT": port,
            "DET_ESTIMATOR_STORE": str(tmp_path / "store.sqlite"),
        }
        env.pop(_info.INFO_VARIABLE, None)
        processes.append(
            subprocess.Popen(
                [sys.executable, str(script), str(refusing), bad],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    return processes


def finish_all(processes: list[subprocess.Popen]) -> list[str]:
    """Every process's stderr once all have exited; fails the test when one is still waiting after the time limit."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    outputs = []
    for rank, process in enumerate(processes):
        try:
            _, stderr = process.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for each in processes:
                each.kill()
                each.communicate()
            pytest.fail(f"process {rank} still waited {TIMEOUT_SECONDS} s after the other refused its arguments")
        outputs.append(stderr)
    return outputs


@pytest.mark.parametrize(("refusing", "bad"), [(0, "config"), (0, "argument"), (1, "argument")])
def test_every_process_fails_promptly_with_the_refused_arguments_message(tmp_path, refusing, bad):
    processes = start_by_hand(tmp_path, refusing, bad)
    outputs = finish_all(processes)

    for rank, (process, stderr) in enumerate(zip(processes, outputs)):
        assert process.returncode != 0, stderr
        assert MESSAGES[bad] in stderr, stderr
        if rank != refusing:
            said = f"RefusedOnAnotherProcessError: det.core.init() failed on process {refusing} of the 2 of this job"
            assert said in stderr, stderr
    if (tmp_path / "store.sqlite").exists():  # nothing is recorded for a run refused before it started
        with ExperimentStore(tmp_path / "store.sqlite") as store:
            assert store.experiments() == []


@pytest.mark.horovod
def test_under_horovodrun_every_rank_says_what_rank_0_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    horovodrun = Path(sys.executable).with_name("horovodrun")
    command = [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script), "0", "config"]
    env = {**os.environ, "DET_CHIEF_PORT": str(free_port()), "DET_ESTIMATOR_STORE": str(tmp_path / "store.sqlite")}
    env.pop(_info.INFO_VARIABLE, None)
    try:
        result = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS * 2
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"horovodrun did not end within {TIMEOUT_SECONDS * 2} s: {error}")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"[0]<stderr>:det_estimator.config._errors.ConfigError: {MESSAGES['config']}" in output, output
    assert "[1]<stderr>:det_estimator.core._context.RefusedOnAnotherProcessError: det.core.init() failed on " in output
    assert "TRAINING ON" not in output
