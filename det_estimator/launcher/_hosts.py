"""The ``--hosts`` of a run: what can be known of each host before anything starts.

Imports no TensorFlow. A host is this machine under any of its names or addresses, or
another machine that horovodrun reaches over ssh. The entries themselves, and their
text, are ``det_estimator._host_list``'s.
"""

import ipaddress
import socket
import subprocess
from collections.abc import Sequence

from det_estimator._host_list import HostSlots


def address_towards(host: str) -> str:
    """This machine's address on the route to ``host`` (its host name when there is none)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))  # a datagram socket sends nothing on connect
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


# How long the check of a host waits for ssh to connect (as horovodrun's own check does).
_SSH_CONNECT_SECONDS = 10


def check_hosts(hosts: Sequence[HostSlots]) -> None:
    """Refuses a host of ``hosts`` that horovodrun could not start processes on, before anything runs.

    A name that does not resolve, or a host that ``ssh`` (as horovodrun calls it) cannot
    run a command on. Otherwise horovodrun fails on it only once the run starts, with a
    message that does not name the host, and each restart of the trial fails the same way.
    Hosts that are this machine are not reached over ssh.

    Raises:
        ValueError: a host is unknown or unreachable; the message names it and why.
    """
    for host in dict.fromkeys(entry.host for entry in hosts if not entry.is_local):
        try:
            if _names_this_machine(host):
                continue
        except socket.gaierror as error:
            raise ValueError(f"host {host!r} is not known: its name does not resolve ({error.strerror}).") from None
        command = [
            "ssh",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            f"ConnectTimeout={_SSH_CONNECT_SECONDS}",
            host,
            "true",
        ]
        try:
            reached = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=_SSH_CONNECT_SECONDS + 20,
            )
        except FileNotFoundError:
            raise ValueError(f"`ssh` is not installed here, and it is what reaches host {host!r}.") from None
        except subprocess.TimeoutExpired:
            reached = subprocess.CompletedProcess(command, 255, "", "ssh did not finish connecting")
        if reached.returncode != 0:
            said = (reached.stderr.strip().splitlines() or [f"ssh exited with status {reached.returncode}"])[-1]
            raise ValueError(
                f"host {host!r} cannot be reached over ssh ({said}). Every host needs password-less ssh "
                "from this machine, as horovodrun starts the processes there with it."
            )


def slots_on_this_machine(hosts: Sequence[HostSlots]) -> int:
    """How many of the slots of ``hosts`` are on this machine (under any of its names or addresses)."""
    slots = 0
    for entry in hosts:
        try:
            here = entry.is_local or _names_this_machine(entry.host)
        except socket.gaierror:
            here = False  # check_hosts names it
        slots += entry.slots if here else 0
    return slots


def _names_this_machine(host: str) -> bool:
    """Whether the launchers start ``host``'s processes here without ssh, as horovodrun decides it.

    horovodrun resolves the name and starts the processes here when the address is one of
    this machine's network interfaces' own; otherwise it goes over ssh. Another loopback
    address than 127.0.0.1 (127.0.0.2, or 127.0.1.1 where a host name resolves to it) is
    no interface's own: it is reached over ssh, so the pre-flight check reaches it too.

    Raises:
        socket.gaierror: the name does not resolve.
    """
    addresses = {str(found[4][0]) for found in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    return any(_is_this_machine(address) for address in addresses)


def _is_this_machine(address: str) -> bool:
    """Whether ``address`` is the address of one of this machine's network interfaces."""
    if ipaddress.ip_address(address).is_loopback:
        return address in ("127.0.0.1", "::1")  # the loopback interface's own
    # Only an address of one of its interfaces can be bound here.
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True
