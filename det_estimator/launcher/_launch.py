"""Starts the processes of a trial under ``horovodrun --gloo``. Imports no TensorFlow.

Settings reach the workers in one JSON file named by the ``DET_TRIAL_SPEC``
environment variable (read by ``det_estimator.launcher.worker``). A SIGTERM or SIGINT
to the launcher does not kill the workers: it creates the spec's pause file, which every
worker polls, so the job finishes its batch, checkpoints and exits 0.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Optional

SPEC_VARIABLE = "DET_TRIAL_SPEC"


def horovodrun_command(
    num_processes: int, worker_command: Optional[list[str]] = None, hosts: Optional[str] = None
) -> list:
    """The command line that starts ``num_processes`` workers.

    The workers run ``worker_command``, by default det-estimator's trial worker, on this
    machine, or on ``hosts`` (Horovod's ``-H host1:2,host2:2``).
    """
    horovodrun = Path(sys.executable).with_name("horovodrun")
    if not horovodrun.exists():
        raise FileNotFoundError(
            f"horovodrun was not found next to {sys.executable}; install Horovod with TensorFlow and Gloo "
            "(scripts/setup.sh does) to run a trial on several processes."
        )
    return [
        str(horovodrun),
        "-np",
        str(num_processes),
        "-H",
        hosts or f"localhost:{num_processes}",
        "--gloo",
        *(worker_command or [sys.executable, "-m", "det_estimator.launcher.worker"]),
    ]


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGKILL it when its parent dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


@contextmanager
def pause_on_signals(request_pause: Callable[[], Any]) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call ``request_pause`` instead of ending the process.

    The previous handlers come back on leaving. Must be entered in the main thread, the
    only one Python lets install signal handlers.
    """
    previous = {sig: signal.signal(sig, lambda *_: request_pause()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def launch_directory(shared_parent: Optional[str] = None) -> Iterator[Path]:
    """A scratch directory for a launch's spec, pause and outcome files, removed afterwards.

    Workers on other machines read these files too: give ``shared_parent``, a directory
    on the shared file system, and the scratch directory is made there.
    """
    if shared_parent is not None:
        os.makedirs(shared_parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".det-estimator-launch-", dir=shared_parent) as scratch:
        yield Path(scratch)


def launch_workers(
    spec: dict[str, Any],
    spec_path: Path,
    num_processes: int,
    worker_command: Optional[list[str]] = None,
    hosts: Optional[str] = None,
) -> int:
    """Runs the trial described by ``spec`` on ``num_processes`` workers; returns the exit status.

    With ``hosts``, ``spec_path`` and the spec's files must be on a file system every
    host sees at the same path (see :func:`launch_directory`).

    When one worker fails, horovodrun ends the others and exits non-zero; its output
    carries the failing worker's traceback.
    """
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    pause_file = Path(spec["pause_file"])
    env = dict(os.environ, **{SPEC_VARIABLE: str(spec_path)})
    # A session of its own: Ctrl-C in a terminal reaches only this launcher, which turns
    # it into a pause instead of horovodrun killing the workers mid-checkpoint. Being
    # out of the launcher's process group, horovodrun is told to die with the launcher,
    # so that killing the launcher never leaves workers running on their own.
    process = subprocess.Popen(
        horovodrun_command(num_processes, worker_command, hosts),
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )

    with pause_on_signals(pause_file.touch):
        try:
            return process.wait()
        finally:
            if process.poll() is None:
                process.kill()
