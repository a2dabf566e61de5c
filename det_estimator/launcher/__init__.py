"""Starts the processes of a trial run (horovodrun, or the command itself on one slot). Imports no TensorFlow."""

from det_estimator._host_list import HostSlots, format_hosts, parse_hosts
from det_estimator.launcher._hosts import address_towards, check_hosts, slots_on_this_machine
from det_estimator.launcher._job import Job, ProcessSpec, exec_single, resolve_slots
from det_estimator.launcher._launch import (
    chief_address,
    describe,
    end_supervised,
    free_port,
    horovod_installed,
    horovodrun_command,
    is_self_launching,
    output_pipe,
    pause_on_signals,
    process_command,
    script_command,
    start,
    worker_command,
)
from det_estimator.launcher._startup_hook import has_hook as has_startup_hook
from det_estimator.launcher._store_password import holds_store_password, without_store_password

__all__ = [
    "address_towards",
    "HostSlots",
    "Job",
    "ProcessSpec",
    "check_hosts",
    "chief_address",
    "describe",
    "exec_single",
    "format_hosts",
    "free_port",
    "has_startup_hook",
    "holds_store_password",
    "horovod_installed",
    "horovodrun_command",
    "is_self_launching",
    "output_pipe",
    "parse_hosts",
    "pause_on_signals",
    "process_command",
    "resolve_slots",
    "script_command",
    "slots_on_this_machine",
    "end_supervised",
    "start",
    "without_store_password",
    "worker_command",
]
