"""TensorBoard event files of a trial's training and validation metrics, written without TensorFlow.

TensorBoard's own EventFileWriter opens its file through ``tf.io.gfile``, which imports
TensorFlow (seconds) in processes that otherwise need none: the command, and scripts on
the Core API. The format is simple, so the file is written here with TensorBoard's
TensorFlow-free record writer: a ``brain.Event:2`` header event, then one event per report.
"""

import numbers
import os
import socket
import time
from pathlib import Path
from typing import Any, BinaryIO

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter


class MetricEventFiles:
    """One event file per kind of metrics, under ``directory/training`` and ``directory/validation``.

    ``tensorboard --logdir directory`` then shows each metric against batches, training
    and validation as two runs.
    """

    def __init__(self, directory: str, start_batches: int = 0) -> None:
        self._directory = Path(directory)
        self._start_batches = start_batches
        self._writers: dict[str, RecordWriter] = {}

    def write(self, kind: str, batches: int, metrics: dict[str, Any]) -> None:
        """Writes the numeric metrics as scalars at step ``batches``; other values are skipped."""
        values = [
            summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
            for tag, value in sorted(metrics.items())
            if isinstance(value, numbers.Real) and not isinstance(value, bool)
        ]
        if not values:
            return
        writer = self._writers.get(kind)
        if writer is None:
            writer = self._writers[kind] = _open_event_file(self._directory / kind, self._start_batches)
        event = event_pb2.Event(wall_time=time.time(), step=batches, summary=summary_pb2.Summary(value=values))
        writer.write(event.SerializeToString())
        writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def session_start(start_batches: int) -> bytes:
    """A serialized session-start event for a run of a trial that starts after ``start_batches`` batches.

    A run that starts from a checkpoint after ``start_batches`` trains again the batches
    an earlier run reported past it: a session start at the first batch after the
    checkpoint makes TensorBoard drop the earlier run's points from there on, as it does
    for a TensorFlow job restarted from a checkpoint. Every run's file starts with one,
    the first run's too: the TensorBoard server takes the first session start it reads
    in a folder for the job's start, not for a restart, and would keep the points of a
    run killed past its checkpoint beside those of the run that trained them again.
    """
    start = event_pb2.Event(
        wall_time=time.time(),
        step=start_batches + 1,
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START),
    )
    return start.SerializeToString()


def _open_event_file(directory: Path, start_batches: int = 0) -> RecordWriter:
    """A new event file in ``directory``, named as TensorBoard names them: its header, then :func:`session_start`."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{time.monotonic_ns()}"
    stream: BinaryIO = open(directory / name, "ab")  # noqa: SIM115 -- kept open by the writer until close()
    writer = RecordWriter(stream)
    header = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
    writer.write(header.SerializeToString())
    writer.write(session_start(start_batches))
    writer.flush()
    return writer
