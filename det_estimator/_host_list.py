"""The machines a run's processes go on (``--hosts h1:2,h2:1``): typed once, as :class:`HostSlots` entries.

The text is parsed here, where the command line (``det-estimator experiment create
--hosts``, the launchers' ``--hosts``) and the store read it, and written here for
horovodrun's ``-H`` and the store; everything in between takes the entries. Imports
nothing of det-estimator, so the store, the launcher and orchestration may all use it.
"""

from collections.abc import Sequence
from dataclasses import dataclass

# Hosts that mean this machine: processes for them start here, without ssh.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "")


@dataclass(frozen=True)
class HostSlots:
    """A host and how many processes run on it.

    Attributes:
        host: its name or address (``localhost`` for this machine).
        slots: processes on it.
    """

    host: str
    slots: int

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_HOSTS


def parse_hosts(hosts: str, *, require_slots: bool = False) -> list[HostSlots]:
    """``"h1:2,h2:1"`` as host entries (a host without ``:n`` has one slot, unless ``require_slots``).

    Raises:
        ValueError: an entry is empty, has no slot count when one is required, or its
            slot count is not a positive int.
    """
    entries = []
    for entry in hosts.split(","):
        entry = entry.strip()
        if ":" in entry:
            host, _, count = entry.rpartition(":")
        else:
            host, count = entry, "" if require_slots else "1"
        if not host:
            problem = "an empty entry" if not entry else f"the entry {entry!r} names no host"
        elif not count:
            problem = f"the entry {entry!r} gives no slot count (write {host}:N)"
        elif not count.isdigit():
            problem = f"the slot count of {entry!r} is not a whole number"
        elif int(count) < 1:
            problem = f"{entry!r} gives {host} {int(count)} slots; a host listed needs at least 1"
        else:
            entries.append(HostSlots(host, int(count)))
            continue
        raise ValueError(f"must be host:slots entries separated by commas, not {hosts!r}: {problem}")
    return entries


def format_hosts(hosts: Sequence[HostSlots]) -> str:
    """The entries as ``--hosts`` text, ``"h1:2,h2:1"``: horovodrun's ``-H``, the store's column, messages."""
    return ",".join(f"{entry.host}:{entry.slots}" for entry in hosts)
