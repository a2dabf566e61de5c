"""Each rank's scratch model directory, and the removal of those that killed processes left.

``tf.estimator`` writes checkpoints of the whole model into its ``model_dir``; the trial's
own checkpoints are copied from there. A process that is SIGKILLed (by the OOM killer, a
peer's failure or a user) cannot remove that directory, and a large model leaves gigabytes
in the temporary directory each time. So every scratch directory holds a file locked for
as long as its process lives (the kernel releases the lock however the process ends), and
each new one first removes the directories whose lock can be taken.
"""

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

PREFIX = "det-estimator-rank"
_LOCK_NAME = ".in-use"


@contextlib.contextmanager
def scratch_model_dir(rank: int, root: Optional[Path] = None) -> Iterator[str]:
    """A new directory for the estimator's model_dir, removed on exit.

    Args:
        rank: this process's rank, part of the directory's name.
        root: where to make it; None is the system's temporary directory.
    """
    root = Path(tempfile.gettempdir()) if root is None else root
    remove_abandoned(root)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{rank}-", dir=root) as directory, _held_lock(Path(directory)):
        yield directory


@contextlib.contextmanager
def _held_lock(directory: Path) -> Iterator[None]:
    # Locked under another name, then renamed: a lock file that can be seen is always
    # locked already, so a removal running at the same moment never takes it for abandoned.
    pending = directory / f"{_LOCK_NAME}.{os.getpid()}"
    with open(pending, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pending.rename(directory / _LOCK_NAME)
        yield


def remove_abandoned(root: Path) -> list[Path]:
    """Removes the scratch directories under ``root`` whose process has ended; returns them.

    Directories of other users, and those without a lock file (made before locks were
    used, or being made right now), are left alone.
    """
    removed = []
    for directory in root.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            if directory.is_symlink() or directory.stat().st_uid != os.getuid():
                continue
            with open(directory / _LOCK_NAME) as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its process still runs
                shutil.rmtree(directory, ignore_errors=True)
                removed.append(directory)
    return removed
