"""TensorBoard event files of a trial's training and validation metrics.

Written with TensorBoard's own event writer, which needs no TensorFlow graph: the
controller reports metrics from inside a running session, where TensorFlow's
summary ops could not be created.
"""

import numbers
import time
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class MetricEventFiles:
    """One event file per kind of metrics, under ``directory/training`` and ``directory/validation``.

    ``tensorboard --logdir directory`` then shows each metric against batches, training
    and validation as two runs.
    """

    def __init__(self, directory: str) -> None:
        self._directory = Path(directory)
        self._writers: dict[str, EventFileWriter] = {}

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
            (self._directory / kind).mkdir(parents=True, exist_ok=True)
            writer = self._writers[kind] = EventFileWriter(str(self._directory / kind))
        event = event_pb2.Event(wall_time=time.time(), step=batches, summary=summary_pb2.Summary(value=values))
        writer.add_event(event)
        writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
