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
from typing import TYPE_CHECKING, Any, BinaryIO, Optional

from google.protobuf import struct_pb2
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

if TYPE_CHECKING:
    from tensorboard.summary.writer.record_writer import RecordWriter

# The HParams plugin's names (tensorboard.plugins.hparams.metadata, which imports NumPy
# for the rest of what it holds, and every command imports this module).
_HPARAMS_PLUGIN = "hparams"
_SESSION_START_TAG = "_hparams_/session_start_info"
_HPARAMS_DATA_VERSION = 0


class MetricEventFiles:
    """One event file per kind of metrics, under ``directory/training`` and ``directory/validation``.

    ``tensorboard --logdir directory`` then shows each metric against batches, training
    and validation as two runs. Given ``hparams``, a third file in ``directory`` holds
    them for the HParams plugin (:meth:`write_hparams`), once the first metrics come.
    """

    def __init__(self, directory: str, start_batches: int = 0, hparams: Optional[dict[str, Any]] = None) -> None:
        self._directory = Path(directory)
        self._start_batches = start_batches
        self._writers: dict[str, RecordWriter] = {}
        # Written with the first metrics (:meth:`write_hparams`): a run that reports nothing
        # numeric leaves no event file.
        self._hparams = hparams

    def write(self, kind: str, batches: int, metrics: dict[str, Any]) -> None:
        """Writes the numeric metrics as scalars at step ``batches``; other values are skipped."""
        values = [
            summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
            for tag, value in sorted(metrics.items())
            if isinstance(value, numbers.Real) and not isinstance(value, bool)
        ]
        if not values:
            return
        if self._hparams is not None:
            self.write_hparams(self._hparams)
            self._hparams = None
        writer = self._writers.get(kind)
        if writer is None:
            writer = self._writers[kind] = _open_event_file(self._directory / kind, self._start_batches)
        event = event_pb2.Event(wall_time=time.time(), step=batches, summary=summary_pb2.Summary(value=values))
        writer.write(event.SerializeToString())
        writer.flush()

    def write_hparams(self, hparams: dict[str, Any]) -> None:
        """Writes the trial's hyperparameters as TensorBoard's HParams plugin reads them: a session start.

        In ``directory`` itself, so that the run of the session is the trial's folder, and
        its metrics (``training/loss``, ``validation/<searcher metric>``...) are that
        session's: ``tensorboard --logdir <store files>/experiments/ID`` then shows the
        trials in its HParams table, parallel coordinates and scatter plots. Each run of
        the trial writes one; the plugin takes the latest.
        """
        start = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
        for name, value in _flat(hparams).items():
            start.hparams[name].CopyFrom(_hparam_value(value))
        content = plugin_data_pb2.HParamsPluginData(session_start_info=start, version=_HPARAMS_DATA_VERSION)
        plugin_data = summary_pb2.SummaryMetadata.PluginData(
            plugin_name=_HPARAMS_PLUGIN, content=content.SerializeToString()
        )
        metadata = summary_pb2.SummaryMetadata(plugin_data=plugin_data)
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=_SESSION_START_TAG, metadata=metadata)])
        writer = self._writers.get("hparams")
        if writer is None:
            writer = self._writers["hparams"] = _open_event_file(self._directory, self._start_batches)
        writer.write(event_pb2.Event(wall_time=time.time(), step=0, summary=summary).SerializeToString())
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


def _open_event_file(directory: Path, start_batches: int = 0) -> "RecordWriter":
    """A new event file in ``directory``, named as TensorBoard names them: its header, then :func:`session_start`."""
    # Imported here: `tensorboard.summary` loads NumPy and TensorBoard's summary API, a
    # third of a second in every process that imports the store, most of which (the
    # command, a run's launcher, the ranks other than the chief) never write an event.
    from tensorboard.summary.writer.record_writer import RecordWriter

    directory.mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{time.monotonic_ns()}"
    stream: BinaryIO = open(directory / name, "ab")  # noqa: SIM115 -- kept open by the writer until close()
    writer = RecordWriter(stream)
    header = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
    writer.write(header.SerializeToString())
    writer.write(session_start(start_batches))
    writer.flush()
    return writer


def _flat(hparams: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters as dotted names, as the HParams plugin lists one value per name."""
    flat: dict[str, Any] = {}
    for name, value in hparams.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _hparam_value(value: Any) -> struct_pb2.Value:
    """A hyperparameter as the plugin's Value: a number, a bool or text (anything else as its text)."""
    if isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if isinstance(value, numbers.Real):
        return struct_pb2.Value(number_value=float(value))
    return struct_pb2.Value(string_value=value if isinstance(value, str) else str(value))
