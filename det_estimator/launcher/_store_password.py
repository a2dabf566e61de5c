"""The store's password handed to a run's processes in a file, not on a command line.

horovodrun, and the TensorFlow launcher for a process on another host, pass a process's
environment on as text: ``ssh HOST 'cd DIR && env KEY=VALUE ... command'`` (horovodrun
writes it into a shell's command line for this machine's processes too), which ``ps``
shows to every user of both hosts. A password in the URL of ``DET_ESTIMATOR_STORE`` or
in ``PGPASSWORD`` would be there. :func:`without_store_password` moves it into a
password file in libpq's ``.pgpass`` format, readable by this user alone, in a folder
every host of the run sees, and names that file in ``PGPASSFILE``, which libpq (under
psycopg) reads itself; the variable keeps the URL without its password.

Imports no TensorFlow, and the store only when there is a password to move.
"""

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from det_estimator import _environment_variables as environment_variables

# libpq's own variables: a password for every connection, and the password file it reads.
PASSWORD_VARIABLE = "PGPASSWORD"
PASSWORD_FILE_VARIABLE = "PGPASSFILE"
# The file's name in the folder it is written to.
PASSWORD_FILE_NAME = "store.pgpass"


def holds_store_password(env: Mapping[str, str]) -> bool:
    """Whether ``env`` gives a PostgreSQL password: in ``PGPASSWORD``, or in the URL of ``DET_ESTIMATOR_STORE``."""
    return bool(env.get(PASSWORD_VARIABLE)) or _url_password(env) is not None


def without_store_password(env: Mapping[str, str], folder: Path) -> dict[str, str]:
    """``env`` with the store's password moved into a password file written in ``folder``.

    The file's lines: the store's host, port, database and user with the password of
    ``DET_ESTIMATOR_STORE``'s URL; ``PGPASSWORD`` for any other connection (libpq prefers
    it to any file); else the lines of the password file the processes would have read
    (``PGPASSFILE``, or ``~/.pgpass``), so that what they reached before they still reach.

    Args:
        env: the environment the processes are to get.
        folder: a folder every host of the run sees, removed when the run ends.

    Returns:
        A copy of ``env`` when it gives no password; else ``env`` with
        ``DET_ESTIMATOR_STORE`` the URL without its password, no ``PGPASSWORD``, and
        ``PGPASSFILE`` naming the file.
    """
    moved = dict(env)
    if not holds_store_password(env):
        return moved
    from det_estimator.store import parse_store_location

    lines = []
    url_password = _url_password(env)
    if url_password is not None:
        location = parse_store_location(env[environment_variables.STORE], environment_variables.STORE)
        url = location.sqlalchemy_url()
        lines.append(_line(url.host, url.port, url.database, url.username, url_password))
        moved[environment_variables.STORE] = location.without_password
    password = moved.pop(PASSWORD_VARIABLE, "")
    if password:
        lines.append(_line(None, None, None, None, password))
    else:
        lines.extend(_lines_read_before(env))
    path = folder / PASSWORD_FILE_NAME
    # libpq ignores a password file that others may read; written so from its first byte.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in lines))
    moved[PASSWORD_FILE_VARIABLE] = str(path)
    return moved


def _url_password(env: Mapping[str, str]) -> Optional[str]:
    """The password in ``DET_ESTIMATOR_STORE``'s URL, or None (a path, a URL without one, or one not read)."""
    given = env.get(environment_variables.STORE, "")
    if "://" not in given:
        return None
    from det_estimator.store import StoreUnusableError, parse_store_location

    try:
        location = parse_store_location(given, environment_variables.STORE)
    except StoreUnusableError:
        return None  # the processes refuse it themselves, with the message
    if location.url is None:
        return None
    password = location.sqlalchemy_url().password
    return None if password is None else str(password)


def _line(host: Optional[str], port: Optional[int], database: Optional[str], user: Optional[str], password: str) -> str:
    """One line of a password file: ``host:port:database:user:password``, ``*`` for what is not given."""
    fields = [host, None if port is None else str(port), database, user]
    return ":".join("*" if field is None else _escaped(field) for field in fields) + ":" + _escaped(password)


def _escaped(field: str) -> str:
    # A password file's separator and its escape are escaped with a backslash in every field.
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _lines_read_before(env: Mapping[str, str]) -> list[str]:
    """The lines of the password file libpq would read under ``env``; none when it would read none."""
    given = env.get(PASSWORD_FILE_VARIABLE)
    path = Path(given) if given else Path(env.get("HOME") or Path.home()) / ".pgpass"
    try:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            return []  # libpq ignores a file that others may read
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
