"""One rank of a pool of Horovod ranks that runs the other worker scripts in turn, in this process.

Started once under ``horovodrun -np 2 --gloo`` by tests/distributed/conftest.py, so that the
tests that only need two live ranks pay for TensorFlow, Horovod and horovodrun once, not
once a test. Every rank runs the same tasks in the same order, as the ranks of a job of
their own would.

Usage: pool.py DIRECTORY

Task ``n`` is ``DIRECTORY/task-<n>.json``: ``{"script": path, "args": [...], "env": {...}}``,
or ``{"stop": true}``, which ends the pool. This rank runs the script as ``__main__`` with
``sys.argv`` set to the script and its arguments and the task's variables added to the
environment, its output going to ``DIRECTORY/output-<n>-rank<r>.txt``, then writes
``DIRECTORY/done-<n>-rank<r>.json``: ``{"status": exit status}`` (1 if the script raised).
The environment, working directory, ``sys.argv`` and ``sys.path`` are restored after each task.
"""

import contextlib
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

from det_estimator import _horovod

POLL_SECONDS = 0.02


@contextlib.contextmanager
def output_to(path: Path):
    """Sends this process's stdout and stderr (file descriptors 1 and 2 too) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w") as output:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for descriptor in saved:
                os.close(descriptor)


def run_script(script: str, args: list, env: dict) -> int:
    """Runs ``script`` as ``python script *args`` would, in this process; returns its exit status."""
    saved_env, saved_cwd, saved_argv, saved_path = dict(os.environ), os.getcwd(), sys.argv, list(sys.path)
    os.environ.update(env)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv, sys.path[:] = saved_argv, saved_path


def main() -> None:
    directory = Path(sys.argv[1])
    hvd = _horovod.init()  # once, as every task's script would
    rank = hvd.rank()
    (directory / f"ready-rank{rank}").touch()
    number = 0
    while True:
        task_path = directory / f"task-{number}.json"
        while not task_path.exists():
            time.sleep(POLL_SECONDS)
        task = json.loads(task_path.read_text())
        if task.get("stop"):
            return
        with output_to(directory / f"output-{number}-rank{rank}.txt"):
            status = run_script(task["script"], task["args"], task["env"])
        done = directory / f"done-{number}-rank{rank}.json"
        done.with_suffix(".tmp").write_text(json.dumps({"status": status}))
        done.with_suffix(".tmp").rename(done)
        number += 1


if __name__ == "__main__":
    main()
