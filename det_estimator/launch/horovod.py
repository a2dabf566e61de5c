"""``python3 -m det_estimator.launch.horovod [--slots N] [--hosts h1:n,...] -- python3 train.py ...``.

Runs the command under ``horovodrun --gloo`` on every slot (the script calls
``hvd.init()`` and ``det.core.DistributedContext.from_horovod(hvd)``), with
det-estimator's chief address and port set for the object collectives. horovodrun
streams the output and ends the job when a process fails; the launcher passes SIGTERM
and SIGINT on and exits with horovodrun's status. On one slot the command runs as it
is. Imports no TensorFlow.
"""

import sys
from typing import Optional

from det_estimator.launch import _args
from det_estimator.launcher import Job, ProcessSpec, exec_single, horovodrun_command, script_command


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the launcher; returns the job's exit status."""
    args, command = _args.parse(
        "python3 -m det_estimator.launch.horovod", "Runs a command on every slot under horovodrun.", argv
    )
    entries = _args.placement(args)
    if len(entries) == 1 and entries[0].slots == 1 and entries[0].is_local:
        exec_single(command)
    slots = sum(entry.slots for entry in entries)
    run = horovodrun_command(slots, script_command(command), entries)
    with _args.processes_environment() as env:
        return Job([ProcessSpec(0, "localhost", run, _args.chief_settings(entries))], prefix=False, env=env).run()


if __name__ == "__main__":
    sys.exit(main())
