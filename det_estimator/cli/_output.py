"""How the command prints: aligned tables for people, JSON for scripts."""

import sys
import time
from typing import Any, Optional, TextIO

from det_estimator.orchestration import format_value
from det_estimator.store import ExperimentStore, LogOwner


def print_table(header: list[str], rows: list[list[Any]], stream: Optional[TextIO] = None) -> None:
    """Columns padded to their widest cell; numbers aligned right; to ``stream``, else the current stdout."""
    # sys.stdout is read at each call, not bound as a default: a caller may have redirected it since.
    stream = stream or sys.stdout
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max(len(str(text)) for text in column) for column in zip(header, *cells)]
    numeric = [
        all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(header))
    ]
    for row in [header, *cells]:
        line = "  ".join(
            text.rjust(width) if right else text.ljust(width) for text, width, right in zip(row, widths, numeric)
        )
        stream.write(line.rstrip() + "\n")


def format_time(timestamp: Optional[float]) -> str:
    return "-" if timestamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _cell(value: Any) -> str:
    return format_value(value)


def print_log(store: ExperimentStore, owner: LogOwner) -> int:
    """Writes a trial's or job's whole output log to stdout; 1 (with a message) when it has none yet.

    Args:
        store: the store that keeps the log.
        owner: the trial or job.
    """
    if not store.has_log(owner):
        print(f"{str(owner).capitalize()} has no log yet ({store.log_location(owner)}).", file=sys.stderr)
        return 1
    for text in store.log_texts(owner):
        sys.stdout.write(text)
    return 0
