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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

SPEC_VARIABLE = "DET_TRIAL_SPEC"


def horovodrun_command(num_processes: int) -> list:
    """The command line that starts ``num_processes`` workers on this machine."""
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
        f"localhost:{num_processes}",
        "--gloo",
        sys.executable,
        "-m",
        "det_estimator.launcher.worker",
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


def launch_workers(spec: dict[str, Any], spec_path: Path, num_processes: int) -> int:
    """Runs the trial described by ``spec`` on ``num_processes`` workers; returns the exit status.

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
        horovodrun_command(num_processes), env=env, start_new_session=True, preexec_fn=_die_with_parent
    )

    with pause_on_signals(pause_file.touch):
        try:
            return process.wait()
        finally:
            if process.poll() is None:
                process.kill()
