"""``python3 -m det_estimator.launch.tensorflow [--slots N] [--hosts h1:n,...] -- python3 train.py ...``.

Starts the command once per slot, each process a worker of one
``tf.distribute.MultiWorkerMirroredStrategy`` job: its ``TF_CONFIG`` lists every
worker (a free port each) and names it by its rank (``task.index``). The script gets
its :class:`~det_estimator.core.DistributedContext` and strategy from
``det.core.DistributedContext.from_tf_config()``. The output of every process is
streamed, prefixed with its rank; when a process fails the others are killed and the
launcher exits with its status; SIGTERM and SIGINT are passed on to every process (a
script on the Core API pauses). On one slot the command runs as it is, without
``TF_CONFIG``. Imports no TensorFlow.
"""

import json
import sys
from typing import Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator.launch import _args
from det_estimator.launcher import HostSlots, Job, ProcessSpec, address_towards, exec_single, free_port

TF_CONFIG = "TF_CONFIG"
# Workers on other hosts listen from this port on (this machine's get free ports).
_DEFAULT_PORT = 12400


def tf_config_processes(
    command: list[str], entries: list[HostSlots], base_port: Optional[int] = None
) -> list[ProcessSpec]:
    """One process per slot, with the ``TF_CONFIG`` of a job of them all and det-estimator's variables."""
    addresses, hosts = [], []
    remote = [entry.host for entry in entries if not entry.is_local]
    # Workers on other hosts would reach "localhost" on their own machine, not this one.
    here = address_towards(remote[0]) if remote else "localhost"
    for entry in entries:
        for local_rank in range(entry.slots):
            port = free_port() if entry.is_local and base_port is None else (base_port or _DEFAULT_PORT) + local_rank
            addresses.append(f"{here if entry.is_local else entry.host}:{port}")
            hosts.append((entry, local_rank))
    chief = _args.chief_settings(entries)
    processes = []
    for rank, (entry, local_rank) in enumerate(hosts):
        config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": rank}}
        env = {
            TF_CONFIG: json.dumps(config),
            **chief,
            environment_variables.RANK: str(rank),
            environment_variables.SIZE: str(len(addresses)),
            environment_variables.LOCAL_RANK: str(local_rank),
            environment_variables.LOCAL_SIZE: str(entry.slots),
            environment_variables.CROSS_RANK: str(entries.index(entry)),
            environment_variables.CROSS_SIZE: str(len(entries)),
        }
        processes.append(ProcessSpec(rank, entry.host, list(command), env))
    return processes


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the launcher; returns the job's exit status."""
    args, command = _args.parse(
        "python3 -m det_estimator.launch.tensorflow", "Runs a command on every slot with TF_CONFIG set.", argv
    )
    entries = _args.placement(args)
    if len(entries) == 1 and entries[0].slots == 1 and entries[0].is_local:
        exec_single(command, unset=(TF_CONFIG,))
    with _args.processes_environment() as env:
        return Job(tf_config_processes(command, entries, args.port), env=env).run()


if __name__ == "__main__":
    sys.exit(main())
