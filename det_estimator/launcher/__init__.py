"""Starts the processes of a trial run (horovodrun, or the command itself on one slot). Imports no TensorFlow."""

from det_estimator.launcher._launch import (
    chief_address,
    describe,
    free_port,
    horovodrun_command,
    is_self_launching,
    pause_on_signals,
    process_command,
    script_command,
    start,
    worker_command,
)

__all__ = [
    "chief_address",
    "describe",
    "free_port",
    "horovodrun_command",
    "is_self_launching",
    "pause_on_signals",
    "process_command",
    "script_command",
    "start",
    "worker_command",
]
