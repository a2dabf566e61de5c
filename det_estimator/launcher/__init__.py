"""Starts the processes of a trial; the only package that reads DET_* settings in workers."""

from det_estimator.launcher._launch import (
    SPEC_VARIABLE,
    horovodrun_command,
    launch_directory,
    launch_workers,
    pause_on_signals,
)

__all__ = ["SPEC_VARIABLE", "horovodrun_command", "launch_directory", "launch_workers", "pause_on_signals"]
