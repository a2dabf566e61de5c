"""Collectives of Python objects over TCP: a star with the chief (or a machine's local chief) in the middle.

Each non-chief process holds one connection to its chief; a message is an 8-byte
length and a pickle. A collective is a round of messages in the same order on every
process, so TCP's in-order delivery on each connection is all the synchronisation
needed. Nothing here knows about TensorFlow or Horovod: the same star serves jobs
started by horovodrun, by TensorFlow's multi-worker launcher and by tests.

When a process of the job dies, its peers see the connection close and raise
:class:`PeerGoneError` instead of waiting forever.

Every collective starts with each member telling the hub which collective it is in
(broadcast included), so processes that call different ones at the same point, which
would otherwise wait for each other forever or take one collective's data for
another's, fail at once with :class:`CollectiveMismatchError` naming both calls.
"""

import os
import pickle
import socket
import struct
import sys
import time
from types import FrameType
from typing import Any, Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator.errors import DetEstimatorError, PermanentTrialError

_LENGTH = struct.Struct("!Q")
# How long processes wait for each other to start, before giving up with a clear error.
_RENDEZVOUS_SECONDS = float(os.environ.get(environment_variables.RENDEZVOUS_TIMEOUT, "300"))
# det-estimator's own frames are skipped when naming where a collective was called from.
_PACKAGE_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class PeerGoneError(DetEstimatorError, ConnectionError):
    """Another process of the job ended (or never started) in the middle of a collective."""


class CollectiveMismatchError(PermanentTrialError, RuntimeError):
    """Processes of the job called different collectives at the same point of their code."""


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


def _call_site() -> str:
    """Where the running collective was called from: the API entered and the caller's file and line.

    ``"should_preempt() at train.py:31"``: the outermost det-estimator function on the
    stack, and the first frame outside det-estimator that called it.
    """
    frame: Optional[FrameType] = sys._getframe(1)
    entered = None
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIRECTORY):
        entered = frame.f_code.co_name
        frame = frame.f_back
    if frame is None:
        return f"{entered}()"
    where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    return f"{entered}() at {where}" if entered else where


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
        # The listening socket of a hub made by hub_listening, until its members connect.
        self._server: Optional[socket.socket] = None
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
        server = socket.create_server((host, 0))
        star.member, star.size, star._peers, star._hub, star._server = 0, size, [], None, server
        return star, (host, server.getsockname()[1])

    def wait_for_members(self) -> None:
        """Accepts the members of a hub made by :meth:`hub_listening`.

        Raises:
            RuntimeError: the star was not made by :meth:`hub_listening`.
        """
        if self._server is None:
            raise RuntimeError("Star.wait_for_members is for a hub made by Star.hub_listening.")
        self._accept_on(self._server)

    def _accept(self, address: tuple[str, int], listen_host: str) -> None:
        try:
            server = socket.create_server((listen_host, address[1]))
        except OSError as error:
            raise PeerGoneError(
                f"The chief process cannot listen on port {address[1]} for the job's other processes ({error}). "
                f"Set {environment_variables.CHIEF_PORT} to a free port."
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
            self._tell_hub(self._hub, "allgather", obj)
            return _receive(self._hub, "the chief")
        gathered = [obj, *self._hear_members("allgather")]
        for index, peer in enumerate(self._peers, 1):
            _send(peer, gathered, f"process {index}")
        return gathered

    def gather(self, obj: Any) -> Optional[list[Any]]:
        """Every member's ``obj`` on the hub; None on the others."""
        if self.size < 2:
            return [obj]
        if self._hub is not None:
            self._tell_hub(self._hub, "gather", obj)
            return None
        return [obj, *self._hear_members("gather")]

    def broadcast(self, obj: Any) -> Any:
        """The hub's ``obj`` on every member."""
        if self.size < 2:
            return obj
        if self._hub is not None:
            self._tell_hub(self._hub, "broadcast", None)
            return _receive(self._hub, "the chief")
        self._hear_members("broadcast")
        for index, peer in enumerate(self._peers, 1):
            _send(peer, obj, f"process {index}")
        return obj

    @staticmethod
    def _tell_hub(hub: socket.socket, collective: str, obj: Any) -> None:
        """A member's side of a collective: which one it is in, where it was called, and its ``obj``."""
        _send(hub, (collective, _call_site(), obj), "the chief")

    def _hear_members(self, collective: str) -> list[Any]:
        """The hub's side: every member's ``obj``, once each says it is in the same collective as the hub.

        Raises:
            CollectiveMismatchError: a member is in another collective.
        """
        received = []
        for index, peer in enumerate(self._peers, 1):
            theirs, site, obj = _receive(peer, f"process {index}")
            if theirs != collective:
                raise CollectiveMismatchError(
                    f"The job's processes called different collectives at the same point: the chief "
                    f"called {collective} from {_call_site()}, process {index} called {theirs} "
                    f"from {site}. Every process must make the same collective calls in the same order: "
                    "allgather, gather and broadcast, and what calls them on every process "
                    "(preempt.should_preempt(), searcher.operations(), checkpoint.store_path(shard=True)); "
                    "a call under `if rank == 0:` alone is made by the chief only."
                )
            received.append(obj)
        return received

    def close(self) -> None:
        for connection in [*self._peers, *([self._hub] if self._hub else [])]:
            connection.close()
        self._peers, self._hub = [], None
