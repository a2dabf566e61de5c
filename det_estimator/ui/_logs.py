"""The end of a trial's log, and what it printed since, read only from the store's own files."""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator.store import ExperimentStore, TrialRecord

# What the trial page shows at first, and the most one refresh adds.
TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class LogChunk:
    """Part of a trial's log.

    Attributes:
        text: the bytes read, decoded (an invalid sequence shows as U+FFFD).
        offset: where the next read starts: the file's size when it was read.
        skipped: whether the text starts past the beginning of what was asked (the log was longer).
        missing: why there is no log to show ("" when there is one).
    """

    text: str
    offset: int
    skipped: bool = False
    missing: str = ""


def read_log(store: ExperimentStore, trial: TrialRecord, offset: Optional[int] = None) -> LogChunk:
    """The trial's log from ``offset`` (its last :data:`TAIL_BYTES` when None), at most :data:`TAIL_BYTES` of it.

    Only a log inside the store's own files is read: a store's record names the path, and
    a page must reach no other file whatever the record says.
    """
    path = Path(trial.log_path)
    if not _inside(path, store.files_dir):
        return LogChunk("", 0, missing=f"its log {path} is not among the store's files")
    try:
        with open(path, "rb") as log:
            size = log.seek(0, 2)
            start = max(size - TAIL_BYTES, 0) if offset is None or offset > size else offset
            skipped = size - start > TAIL_BYTES
            if skipped:
                start = size - TAIL_BYTES
            log.seek(start)
            data = log.read(size - start)
    except FileNotFoundError:
        return LogChunk("", 0, missing="it has printed nothing yet")
    except OSError as error:
        return LogChunk("", 0, missing=f"its log cannot be read: {error.strerror or error}")
    return LogChunk(
        data.decode("utf-8", errors="replace"), start + len(data), skipped or (offset is None and start > 0)
    )


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
