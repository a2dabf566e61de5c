"""The context directory's ``startup-hook.sh``: run once per host before a run's processes start, as the reference does.

Every process of a run whose context directory holds the hook starts as
``python -m det_estimator.launcher._startup_hook -- <command>`` (:func:`hooked_command`).
The first process of each host (Horovod's local rank 0, or the only one) runs the hook
with bash in the context directory, its working directory; what the hook prints goes to
the run's output, and so to the trial's log. The variables the hook exports reach the
command, as the reference's entrypoint sources the hook. The host's other processes wait
for its outcome, then each becomes the command with the hook's changes to the
environment applied to its own (its rank stays its own).

A command that is one of det-estimator's own launchers (``det_estimator.launch.<engine>``)
is one process, which starts the slots itself: the hook runs once, on the host that
starts it.

A hook that fails (a non-zero exit status) starts nothing: the first process of the host
says so, records it as the run's error (a permanent one: the same hook fails the same way
on a restart), and every process of that host exits with the hook's status.

Imports no TensorFlow, nor anything of det-estimator until a hook fails.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from det_estimator import _environment_variables as environment_variables

HOOK_NAME = "startup-hook.sh"
# Sources the hook, so that what it exports reaches the command, then writes the
# environment to the file named by $1 (NUL-separated, as `env -0` writes it).
_SOURCE_AND_SAVE = 'source ./startup-hook.sh; status=$?; env -0 > "$1"; exit $status'
_POLL_SECONDS = 0.1
# What bash itself sets or changes in any environment it runs in: not the hook's doing.
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})


def has_hook(context_dir: str) -> bool:
    """Whether ``context_dir`` holds a ``startup-hook.sh``."""
    return (Path(context_dir) / HOOK_NAME).is_file()


def hooked_command(command: list[str]) -> list[str]:
    """``command`` run after the context directory's hook, on every process it starts as."""
    return [sys.executable, "-m", "det_estimator.launcher._startup_hook", "--", *command]


def _local_rank() -> int:
    # horovodrun sets it in every process it starts; a process started alone is the first of its host.
    return int(os.environ.get("HOROVOD_LOCAL_RANK", "0"))


def _outcome_directory() -> Path:
    """Where the host's first process leaves the hook's outcome for the others: beside the run's info file."""
    info = os.environ.get(environment_variables.CLUSTER_INFO)
    # Without a run (started by hand), this process is the only one: a directory of its own.
    directory = Path(info).parent if info else Path(tempfile.mkdtemp(prefix="det-startup-hook-"))
    return directory / "startup-hook"


def _run_hook(outcome: Path) -> int:
    """Runs the hook in the working directory; writes what it exported and then its status into ``outcome``."""
    outcome.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    print(f"det-estimator: running {HOOK_NAME} on {host}", flush=True)
    saved = outcome / f"{host}.env0"
    status = subprocess.run(["bash", "-c", _SOURCE_AND_SAVE, "bash", str(saved)], check=False).returncode
    (outcome / f"{host}.changes.json").write_text(json.dumps(_changes(saved)), encoding="utf-8")
    written = outcome / f"{host}.status.tmp"
    written.write_text(str(status), encoding="utf-8")
    written.rename(outcome / f"{host}.status")  # whole, or not there yet for the others
    return status


def _wait_for_hook(outcome: Path) -> int:
    """The status of the hook the host's first process runs, once it has run."""
    status_file = outcome / f"{socket.gethostname()}.status"
    while not status_file.exists():
        time.sleep(_POLL_SECONDS)
    return int(status_file.read_text(encoding="utf-8"))


def _changes(saved: Path) -> dict[str, Any]:
    """What the hook changed in the environment it was sourced in: ``{"set": {name: value}, "unset": [names]}``.

    Only the changes are handed on: each process keeps its own variables (its rank among
    them, which horovodrun sets per process). Nothing when the hook exited before the
    environment was written.
    """
    if not saved.exists():
        return {"set": {}, "unset": []}
    entries = saved.read_bytes().decode("utf-8", errors="surrogateescape").split("\0")
    after = dict(entry.split("=", 1) for entry in entries if "=" in entry)
    before = dict(os.environ)
    changed = {name: value for name, value in after.items() if before.get(name) != value and name not in _SHELL_OWN}
    unset = [name for name in before if name not in after and name not in _SHELL_OWN]
    return {"set": changed, "unset": unset}


def _hook_environment(outcome: Path) -> dict[str, str]:
    """This process's environment with the hook's changes."""
    changes = json.loads((outcome / f"{socket.gethostname()}.changes.json").read_text(encoding="utf-8"))
    environment = {name: value for name, value in os.environ.items() if name not in changes["unset"]}
    environment.update(changes["set"])
    return environment


def _record_failure(status: int) -> None:
    """Records the hook's failure as the run's error, when the process belongs to a recorded run."""
    from det_estimator import _info
    from det_estimator.lifecycle import ErrorKind, RunError, RunLifecycle
    from det_estimator.store import ExperimentStore

    info = _info.get_cluster_info()
    if info is None or info.trial is None:
        return
    error = RunError(
        ErrorKind.RAISED,
        failure_message(status, socket.gethostname()),
        rank=int(os.environ.get("HOROVOD_RANK", "0")),
        type="StartupHookError",
        permanent=True,
    )
    with ExperimentStore(info.store_path) as store:
        RunLifecycle(store).record_error(info.require_trial().run_id, error)


def failure_message(status: int, host: str) -> str:
    """What a failed hook is reported as."""
    return (
        f"{HOOK_NAME} failed with exit status {status} on {host}, so the trial's processes were not started. "
        f"Fix {HOOK_NAME} in the context directory (its output is above in the trial's log), or remove it."
    )


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the hook (or waits for it), then becomes the command; returns the hook's status if it failed."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[1:] if args[:1] == ["--"] else args
    if not command:
        print("usage: python -m det_estimator.launcher._startup_hook -- <command>", file=sys.stderr)
        return 2
    outcome = _outcome_directory()
    first = _local_rank() == 0
    status = _run_hook(outcome) if first else _wait_for_hook(outcome)
    if status != 0:
        if first:
            print(f"det-estimator: {failure_message(status, socket.gethostname())}", file=sys.stderr, flush=True)
            _record_failure(status)
        return status
    sys.stdout.flush()
    os.execvpe(command[0], command, _hook_environment(outcome))
    return 0  # not reached: the process is the command now


if __name__ == "__main__":
    sys.exit(main())
