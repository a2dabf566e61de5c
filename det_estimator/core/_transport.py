"""Collectives of Python objects over TCP: a star with the chief (or a machine's local chief) in the middle.

Each non-chief process holds one connection to its chief; a message is an 8-byte
length and a pickle. A collective is a round of messages in the same order on every
process, so TCP's in-order delivery on each connection is all the synchronisation
needed. Nothing here knows about TensorFlow or Horovod: the same star serves jobs
started by horovodrun, by TensorFlow's multi-worker launcher and by tests.

When a process of the job dies, its peers see the connection close and raise
:class:`PeerGoneError` instead of waiting forever.
"""

import os
import pickle
import socket
import struct
import time
from typing import Any, Optional

from det_estimator.errors import DetEstimatorError

_LENGTH = struct.Struct("!Q")
# How long processes wait for each other to start, before giving up with a clear error.
_RENDEZVOUS_SECONDS = float(os.environ.get("DET_RENDEZVOUS_TIMEOUT", "300"))


class PeerGoneError(DetEstimatorError, ConnectionError):
    """Another process of the job ended (or never started) in the middle of a collective."""


def _send(connection: socket.socket, obj: Any, peer: str = "a process of the job") -> None:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        connection.sendall(_LENGTH.pack(len(payload)) + payload)
    except OSError as error:  # a reset or a broken pipe: the process at the other end is gone
        raise PeerGoneError(f"{peer} closed its connection in the middle of a collective ({error}).") from None


def _receive_exactly(connection: socket.socket, count: int, peer: str) -> bytes:
    chunks = []
    while count:
        try:
            chunk = connection.recv(min(count, 1 << 20))
        except OSError as error:
            # A peer that exits with data unread resets the connection rather than closing it.
            raise PeerGoneError(
                f"{peer} closed its connection in the middle of a collective ({error}): its process ended."
            ) from None
        if not chunk:
            raise PeerGoneError(f"{peer} closed its connection in the middle of a collective: its process ended.")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _receive(connection: socket.socket, peer: str) -> Any:
    (length,) = _LENGTH.unpack(_receive_exactly(connection, _LENGTH.size, peer))
    return pickle.loads(_receive_exactly(connection, length, peer))


class Star:
    """One star of processes: member 0 is the hub, members 1..size-1 connect to it.

    Args:
        member: this process's index in the star.
        size: how many processes are in it.
        hub_address: ``(host, port)`` the hub listens on and the others connect to.
        listen_host: the interface the hub binds (``""`` for all of them).

    Raises:
        PeerGoneError: a member did not connect within the rendezvous timeout
            (``DET_RENDEZVOUS_TIMEOUT`` seconds, 300 by default).
    """

    def __init__(self, member: int, size: int, hub_address: tuple[str, int], listen_host: Optional[str] = None):
        self.member = member
        self.size = size
        self._peers: list[socket.socket] = []
        self._hub: Optional[socket.socket] = None
        if size < 2:
            return
        if member == 0:
            self._accept(hub_address, hub_address[0] if listen_host is None else listen_host)
        else:
            self._connect(hub_address)

    @classmethod
    def hub_listening(cls, size: int, host: str = "127.0.0.1") -> tuple["Star", tuple[str, int]]:
        """A hub on a free port of ``host``; returns it and the address members must connect to.

        The members connect while the hub waits in :meth:`wait_for_members`.
        """
        star = cls.__new__(cls)
        star.member, star.size, star._peers, star._hub = 0, size, [], None
        star._server = socket.create_server((host, 0))
        return star, (host, star._server.getsockname()[1])

    def wait_for_members(self) -> None:
        """Accepts the members of a hub made by :meth:`hub_listening`."""
        self._accept_on(self._server)

    def _accept(self, address: tuple[str, int], listen_host: str) -> None:
        try:
            server = socket.create_server((listen_host, address[1]))
        except OSError as error:
            raise PeerGoneError(
                f"The chief process cannot listen on port {address[1]} for the job's other processes ({error}). "
                "Set DET_CHIEF_PORT to a free port."
            ) from error
        self._accept_on(server)

    def _accept_on(self, server: socket.socket) -> None:
        peers: dict[int, socket.socket] = {}
        deadline = time.monotonic() + _RENDEZVOUS_SECONDS
        with server:
            while len(peers) < self.size - 1:
                server.settimeout(max(deadline - time.monotonic(), 0.01))
                try:
                    connection, _ = server.accept()
                except socket.timeout:
                    missing = sorted(set(range(1, self.size)) - set(peers))
                    raise PeerGoneError(
                        f"Processes {missing} of the job never connected to the chief within "
                        f"{_RENDEZVOUS_SECONDS:.0f} s: they did not start, or cannot reach it."
                    ) from None
                connection.settimeout(None)
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peers[_receive(connection, "a process of the job")] = connection
        self._peers = [peers[member] for member in range(1, self.size)]

    def _connect(self, address: tuple[str, int]) -> None:
        deadline = time.monotonic() + _RENDEZVOUS_SECONDS
        while True:
            try:
                connection = socket.create_connection(address, timeout=5)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise PeerGoneError(
                        f"Process {self.member} could not reach the chief at {address[0]}:{address[1]} within "
                        f"{_RENDEZVOUS_SECONDS:.0f} s ({error})."
                    ) from error
                time.sleep(0.05)
        connection.settimeout(None)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _send(connection, self.member)
        self._hub = connection

    def allgather(self, obj: Any) -> list[Any]:
        """Every member's ``obj`` in member order, on every member."""
        if self.size < 2:
            return [obj]
        if self._hub is not None:
            _send(self._hub, obj, "the chief")
            return _receive(self._hub, "the chief")
        gathered = [obj] + [_receive(peer, f"process {index}") for index, peer in enumerate(self._peers, 1)]
        for index, peer in enumerate(self._peers, 1):
            _send(peer, gathered, f"process {index}")
        return gathered

    def gather(self, obj: Any) -> Optional[list[Any]]:
        """Every member's ``obj`` on the hub; None on the others."""
        if self.size < 2:
            return [obj]
        if self._hub is not None:
            _send(self._hub, obj, "the chief")
            return None
        return [obj] + [_receive(peer, f"process {index}") for index, peer in enumerate(self._peers, 1)]

    def broadcast(self, obj: Any) -> Any:
        """The hub's ``obj`` on every member."""
        if self.size < 2:
            return obj
        if self._hub is not None:
            return _receive(self._hub, "the chief")
        for index, peer in enumerate(self._peers, 1):
            _send(peer, obj, f"process {index}")
        return obj

    def close(self) -> None:
        for connection in [*self._peers, *([self._hub] if self._hub else [])]:
            connection.close()
        self._peers, self._hub = [], None
