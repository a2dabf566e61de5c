"""Showing an experiment's progress: a live bar on a terminal, plain lines anywhere else.

Both displays take the follower's events; nothing here reads the trial's output.
"""

import os
import sys
from typing import Any, Optional, Protocol

from det_estimator.orchestration._follow import (
    CheckpointSaved,
    Event,
    MetricsReported,
    Progress,
    TrialEnded,
    TrialStarted,
)
from det_estimator.store import MetricKind, SearchState, State


class OutputStream(Protocol):
    """Where a display writes: ``sys.stdout``, or a stream that stands for it."""

    def write(self, text: str) -> int:
        """Writes ``text``; returns how many characters it wrote."""

    def flush(self) -> None:
        """Writes out what is buffered."""

    def isatty(self) -> bool:
        """Whether it is a terminal."""

    def fileno(self) -> int:
        """Its file descriptor."""


class Display(Protocol):
    """Shows events as they come, and lines of the trial's output when asked to."""

    def show(self, event: Event) -> None:
        """Shows one event."""

    def echo(self, line: str) -> None:
        """Shows a line of the trial's own output (``--verbose``)."""

    def message(self, text: str) -> None:
        """Shows a message of the launcher's (pausing, restarting, ...)."""

    def close(self) -> None:
        """Ends the display (a bar is left at its last state)."""


def describe_end(event: TrialEnded) -> str:
    """What a trial's end means, in a few words: done, stopped early by the search, waiting, failed."""
    if event.search_state == SearchState.EXITED and event.state != State.PAUSED:
        return f"exited early after {event.batches} batches ({event.error or event.state})"
    if event.state == State.ERROR:
        return f"failed after {event.batches} batches ({event.error})" if event.error else "failed"
    if event.state == State.PAUSED:
        return f"paused after {event.batches} batches"
    if event.search_state == SearchState.WAITING:
        return f"waits for a promotion after {event.batches} batches"
    return f"done after {event.batches} batches"


def format_value(value: Any) -> str:
    """A metric value as the displays and tables show it."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def format_size(size_bytes: int) -> str:
    """A size in bytes as the command and the web page show it: B, then kB, MB and GB of 1,000."""
    size = float(size_bytes)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def format_metrics(metrics: dict[str, Any]) -> str:
    """``name value`` pairs, sorted by name."""
    return "  ".join(f"{name} {format_value(value)}" for name, value in sorted(metrics.items()))


class _Rates:
    """Batches per second of each trial, from the times its reports were recorded."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, int]] = {}
        self.rate: dict[int, float] = {}

    def update(self, trial_id: int, batches: int, now: float) -> None:
        if trial_id in self._last:
            then, before = self._last[trial_id]
            if batches > before and now > then:
                self.rate[trial_id] = (batches - before) / (now - then)
        self._last[trial_id] = (now, batches)

    def restart(self, trial_id: int) -> None:
        """Forgets a trial's last report: the time until its next run (a promotion, a restart) is no training."""
        self._last.pop(trial_id, None)
        self.rate.pop(trial_id, None)


class PlainDisplay:
    """One line per workload, validation and checkpoint: for logs, pipes and CI.

    Args:
        stream: where to write (default: standard output).
        multi_trial: prefix every line with its trial (an experiment of several trials).
    """

    def __init__(self, stream: Optional[OutputStream] = None, multi_trial: bool = False) -> None:
        self._stream = stream
        self._multi_trial = multi_trial
        self._max_batches: dict[int, Optional[int]] = {}
        self._rates = _Rates()

    def _write(self, trial_id: Optional[int], text: str) -> None:
        prefix = f"trial {trial_id}: " if self._multi_trial and trial_id is not None else ""
        stream = self._stream or sys.stdout
        stream.write(prefix + text + "\n")
        stream.flush()

    def show(self, event: Event) -> None:
        if isinstance(event, TrialStarted):
            self._max_batches[event.trial_id] = event.max_batches
            self._rates.restart(event.trial_id)
            if event.batches_done:
                self._write(event.trial_id, f"resumed after {event.batches_done} batches")
        elif isinstance(event, Progress):
            self._max_batches[event.trial_id] = event.max_batches
        elif isinstance(event, MetricsReported) and event.kind == MetricKind.TRAINING:
            self._rates.update(event.trial_id, event.batches, event.at)
            self._write(event.trial_id, self._training_line(event))
        elif isinstance(event, MetricsReported):
            self._write(event.trial_id, f"validation after {event.batches} batches: {format_metrics(event.metrics)}")
        elif isinstance(event, CheckpointSaved):
            self._write(event.trial_id, f"checkpoint {event.uuid} after {event.batches} batches")
        elif isinstance(event, TrialEnded) and self._multi_trial:
            self._write(event.trial_id, describe_end(event))

    def _training_line(self, event: MetricsReported) -> str:
        total = self._max_batches.get(event.trial_id)
        rate = self._rates.rate.get(event.trial_id)
        parts = []
        if total:
            done = min(event.batches / total, 1.0)
            filled = round(20 * done)
            parts.append(f"[{'#' * filled}{'.' * (20 - filled)}] batches {event.batches}/{total} ({done:.0%})")
        else:
            parts.append(f"batches {event.batches}")
        parts.append(format_metrics(event.metrics))
        if rate:
            parts.append(f"{rate:.1f} batches/s")
            if total:
                parts.append(f"about {max(total - event.batches, 0) / rate:.0f} s left")
        return "  ".join(part for part in parts if part)

    def echo(self, line: str) -> None:
        stream = self._stream or sys.stdout
        stream.write(line if line.endswith("\n") else line + "\n")
        stream.flush()

    def message(self, text: str) -> None:
        self._write(None, text)

    def close(self) -> None:
        pass


def _bar_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The training metrics a bar shows: the loss alone, when there is one.

    A premade estimator also reports a scalar summary per layer (``dnn/dnn/hiddenlayer_0/
    fraction_of_zero_values``, ...): beside them the bar shrank to nothing and the line
    was cut before the loss. The validation lines and the trial's records keep them all.
    """
    return {"loss": metrics["loss"]} if "loss" in metrics else metrics


# Columns a bar leaves free at the right of the terminal: the terminal echoes Ctrl-C there
# as "^C", which past the last column would wrap and leave the bar's line behind, stale.
_ECHO_MARGIN = 2
# Erases to the end of the line: the "^C" a cleared bar leaves behind it.
_CLEAR_TO_END = "\x1b[K"


def _bar_columns(stream: OutputStream) -> Optional[int]:
    """The width a bar may take on ``stream``'s terminal now; None when it is not one (no limit)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None
    return max(columns - _ECHO_MARGIN, 10)


# A bar towards the trial's length; and, while the length is not known (a script that trains
# to a length of its own), the batches trained alone, not "5/?" beside a bar stuck at 0%.
_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]{postfix}"
_COUNT_FORMAT = "{desc}: {n_fmt} [{elapsed}, {rate_fmt}]{postfix}"


class BarDisplay:
    """A progress bar per running trial, redrawn in place, with validations and checkpoints printed above it.

    Uses tqdm, which computes the throughput and the time left from the progress it is
    given. For terminals; :class:`PlainDisplay` is for everything else.

    Args:
        stream: the terminal to draw on.
        multi_trial: name each bar after its trial.
    """

    def __init__(self, stream: Optional[OutputStream] = None, multi_trial: bool = False) -> None:
        self._stream = stream or sys.stdout
        self._multi_trial = multi_trial
        self._bars: dict[int, Any] = {}
        self._lines: dict[int, int] = {}  # each live bar's line, below the printed text
        # The trials whose run has reported progress: their bar's clock runs from that report.
        self._timed: set[int] = set()

    def _bar(self, trial_id: int, total: Optional[int], initial: int = 0) -> Any:
        from tqdm import tqdm

        bar = self._bars.get(trial_id)
        if bar is None:
            if self._multi_trial:
                self._lines[trial_id] = self._free_line()
            bar = self._bars[trial_id] = tqdm(
                total=total,
                initial=initial,
                desc=f"trial {trial_id}" if self._multi_trial else "batches",
                unit="batch",
                file=self._stream,
                # Measured again before each redraw (see _advance), which follows a resize.
                ncols=_bar_columns(self._stream),
                # Several trials' bars: a finished trial's line is written above them instead.
                leave=not self._multi_trial,
                position=self._lines.get(trial_id),
                bar_format=_BAR_FORMAT if total else _COUNT_FORMAT,
            )
        elif total is not None and bar.total != total:
            bar.total = total
            bar.bar_format = _BAR_FORMAT
            bar.refresh()
        return bar

    def _free_line(self) -> int:
        """The first line no live bar holds: a finished trial's bar frees its line for the next one."""
        taken = set(self._lines.values())
        return next(line for line in range(len(taken) + 1) if line not in taken)

    def _write(self, trial_id: Optional[int], text: str) -> None:
        from tqdm import tqdm

        prefix = f"trial {trial_id}: " if self._multi_trial and trial_id is not None else ""
        tqdm.write(_CLEAR_TO_END + prefix + text, file=self._stream)

    def show(self, event: Event) -> None:
        if isinstance(event, TrialStarted):
            self._timed.discard(event.trial_id)
            if event.batches_done:
                self._write(event.trial_id, f"resumed after {event.batches_done} batches")
            self._bar(event.trial_id, event.max_batches, event.batches_done)
        elif isinstance(event, Progress):
            self._advance(event.trial_id, event.batches, event.max_batches)
        elif isinstance(event, MetricsReported) and event.kind == MetricKind.TRAINING:
            bar = self._advance(event.trial_id, event.batches, None)
            bar.set_postfix_str(format_metrics(_bar_metrics(event.metrics)), refresh=True)
        elif isinstance(event, MetricsReported):
            self._write(event.trial_id, f"validation after {event.batches} batches: {format_metrics(event.metrics)}")
        elif isinstance(event, CheckpointSaved):
            self._write(event.trial_id, f"checkpoint {event.uuid} after {event.batches} batches")
        elif isinstance(event, TrialEnded):
            bar = self._bars.pop(event.trial_id, None)
            self._lines.pop(event.trial_id, None)
            self._timed.discard(event.trial_id)
            if bar is not None:
                bar.close()
                # tqdm leaves the cursor after the cleared bar (at the right margin of a
                # full-width one) unless the bar was on the first line: back to the start,
                # or the next line written would begin there.
                self._stream.write("\r")
            if self._multi_trial:
                self._write(event.trial_id, describe_end(event))

    def _advance(self, trial_id: int, batches: int, total: Optional[int]) -> Any:
        bar = self._bar(trial_id, total)
        bar.ncols = _bar_columns(self._stream)
        if batches > bar.n:
            bar.update(batches - bar.n)
        if trial_id not in self._timed:
            # The speed and the time left count from the run's first report, as the plain
            # lines' speed does: the seconds before it went to starting the processes
            # (importing TensorFlow, restoring a checkpoint), which would make a resumed
            # run's few batches look slow.
            self._timed.add(trial_id)
            bar.initial, bar.start_t = bar.n, bar._time()
        return bar

    def echo(self, line: str) -> None:
        self._write(None, line.rstrip("\n"))

    def message(self, text: str) -> None:
        self._write(None, text)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()
        self._lines.clear()


def display_for(stream: OutputStream, multi_trial: bool = False) -> Display:
    """A live bar when ``stream`` is a terminal, plain lines otherwise."""
    if stream.isatty():
        return BarDisplay(stream, multi_trial)
    return PlainDisplay(stream, multi_trial)
