"""Two "hosts" on this machine: network namespaces joined by a veth pair, an sshd in each.

Each namespace has its own network stack (its own addresses, its own loopback) and nothing
else: processes in both see the same file system, so code, store and checkpoints are
shared as on a cluster with a shared file system. The launcher runs inside the first
namespace; horovodrun reaches the second over ssh, with a key made here, through an
``ssh`` wrapper first on ``PATH`` that adds this set-up's client config (horovodrun calls
plain ``ssh``).

Used by the tests/distributed/test_two_hosts*.py files, which share the fixtures and the
command below, and by benchmarks/faults.py. Needs root, ``ip`` and ``/usr/sbin/sshd``
(scripts/setup_system.sh installs it); :func:`unavailable` says why not.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from tests.conftest import load_module

TESTS = Path(__file__).parents[1]
SSHD = "/usr/sbin/sshd"
# The name of each host's one network interface.
INTERFACE = "detnet0"


def unavailable() -> Optional[str]:
    """Why two namespaces with an sshd each cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (scripts/setup_system.sh installs openssh-server as root)"
    probe = f"detprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is refused here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


@dataclass
class Host:
    """One namespace: its name, its address, its sshd."""

    namespace: str
    address: str
    sshd_config: Path
    sshd: Optional[subprocess.Popen] = field(default=None, repr=False)

    def pids(self) -> list[int]:
        """Every process running in this namespace."""
        listed = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True, text=True)
        return [int(pid) for pid in listed.stdout.split()]


class TwoHosts:
    """The two namespaces (``a``, where the launcher runs, and ``b``), and how to run and kill things in them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        tag = f"{os.getpid() % 100000}"
        subnet = 100 + os.getpid() % 100
        self.a = Host(f"detA{tag}", f"10.213.{subnet}.1", directory / "sshd_a_config")
        self.b = Host(f"detB{tag}", f"10.213.{subnet}.2", directory / "sshd_b_config")
        self._veth = (f"dva{tag}", f"dvb{tag}")
        self.bin_dir = directory / "bin"

    @property
    def hosts(self) -> str:
        """``--hosts`` for one slot on each."""
        return f"{self.a.address}:1,{self.b.address}:1"

    def env(self, base: Optional[dict] = None) -> dict[str, str]:
        """An environment whose ``ssh`` reaches the namespaces with this set-up's key."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def command_in(self, host: Host, command: list[str]) -> list[str]:
        """``command``, to be run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", host.namespace, *command]

    def setup(self) -> None:
        self._network()
        self._keys()
        for host in (self.a, self.b):
            self.start_sshd(host)

    def _network(self) -> None:
        veth_a, veth_b = self._veth
        # Both namespaces share this machine's host name; Gloo resolves it to find its own
        # address, so in each it must resolve to that namespace's address, as on two machines.
        # `ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts.
        for host in (self.a, self.b):
            etc = Path("/etc/netns") / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{host.address} {socket.gethostname()}\n")
        for command in (
            ["ip", "netns", "add", self.a.namespace],
            ["ip", "netns", "add", self.b.namespace],
            ["ip", "link", "add", veth_a, "type", "veth", "peer", "name", veth_b],
            ["ip", "link", "set", veth_a, "netns", self.a.namespace],
            ["ip", "link", "set", veth_b, "netns", self.b.namespace],
            # Horovod needs an interface of the same name on every host, as on a cluster.
            ["ip", "-n", self.a.namespace, "link", "set", veth_a, "name", INTERFACE],
            ["ip", "-n", self.b.namespace, "link", "set", veth_b, "name", INTERFACE],
            ["ip", "-n", self.a.namespace, "addr", "add", f"{self.a.address}/24", "dev", INTERFACE],
            ["ip", "-n", self.b.namespace, "addr", "add", f"{self.b.address}/24", "dev", INTERFACE],
            ["ip", "-n", self.a.namespace, "link", "set", INTERFACE, "up"],
            ["ip", "-n", self.b.namespace, "link", "set", INTERFACE, "up"],
            ["ip", "-n", self.a.namespace, "link", "set", "lo", "up"],
            ["ip", "-n", self.b.namespace, "link", "set", "lo", "up"],
        ):
            subprocess.run(command, check=True, capture_output=True, text=True)

    def _keys(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.bin_dir.mkdir(exist_ok=True)
        for name in ("client_key", "host_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.directory / name)],
                check=True,
                capture_output=True,
            )
        shutil.copy(self.directory / "client_key.pub", self.directory / "authorized_keys")
        client = self.directory / "ssh_config"
        client.write_text(
            "Host *\n"
            f"  IdentityFile {self.directory / 'client_key'}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n"
            "  BatchMode yes\n"
            "  ConnectTimeout 10\n"
            "  ServerAliveInterval 2\n"
            "  ServerAliveCountMax 3\n"
            "  LogLevel ERROR\n"
        )
        wrapper = self.bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F "{client}" "$@"\n')
        wrapper.chmod(0o755)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        for host in (self.a, self.b):
            host.sshd_config.write_text(
                f"ListenAddress {host.address}\n"
                "Port 22\n"
                f"HostKey {self.directory / 'host_key'}\n"
                f"PidFile {self.directory / (host.namespace + '.pid')}\n"
                "PermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\n"
                f"AuthorizedKeysFile {self.directory / 'authorized_keys'}\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "StrictModes no\n"
                "UsePAM no\n"
                "ClientAliveInterval 2\n"
                "ClientAliveCountMax 3\n"
            )

    def start_sshd(self, host: Host, timeout: float = 30) -> None:
        """Starts (again) the sshd of ``host`` and waits until it accepts connections."""
        host.sshd = subprocess.Popen(
            self.command_in(host, [SSHD, "-D", "-e", "-f", str(host.sshd_config)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            probe = subprocess.run(
                self.command_in(self.a, ["ssh", host.address, "true"]),
                env=self.env(),
                capture_output=True,
                text=True,
            )
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd in {host.namespace} did not answer: {probe.stderr.strip()}")
            time.sleep(0.2)

    def kill_host(self, host: Host) -> float:
        """SIGKILLs every process in ``host``'s namespace (its sshd too), as a machine that dies; returns when."""
        at = time.time()
        for pid in host.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if host.sshd is not None:
            host.sshd.wait(timeout=30)
        return at

    def teardown(self) -> None:
        for host in (self.a, self.b):
            for pid in host.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if host.sshd is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    host.sshd.wait(timeout=30)
            subprocess.run(["ip", "netns", "delete", host.namespace], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / host.namespace, ignore_errors=True)


@contextlib.contextmanager
def two_hosts(directory: Path) -> Iterator[TwoHosts]:
    """Makes the two hosts, yields them, and removes them (with whatever still runs in them)."""
    made = TwoHosts(directory)
    try:
        made.setup()
        yield made
    finally:
        made.teardown()


# What the tests of two hosts share.
cli = load_module(TESTS / "cli" / "conftest.py", "cli_helpers_for_two_hosts")

# Every test of two hosts is long, and needs root and an sshd (skipped, saying why, without them).
requires_two_hosts = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable() is not None, reason=f"two hosts cannot be made here: {unavailable()}"),
]


class DetInHost(cli.Det):
    """The command, run inside a host's namespace (the first's unless told), with the ssh that reaches the other."""

    def __init__(self, store: Path, hosts: TwoHosts, host: Optional[Host] = None) -> None:
        super().__init__(store)
        self.hosts = hosts
        self.host = host or hosts.a

    def env(self) -> dict[str, str]:
        return self.hosts.env(cli.Det.env())

    def command(self, args: tuple) -> list[str]:
        return self.hosts.command_in(self.host, super().command(args))

    def here(self, *args: object) -> subprocess.CompletedProcess:
        """The command in the host, not in this process: the store may be reachable from the hosts alone."""
        return self(*args)


@pytest.fixture
def hosts(tmp_path):
    """The two hosts, removed at the end with whatever still runs in them."""
    with two_hosts(tmp_path / "hosts") as made:
        yield made


@pytest.fixture
def det(tmp_path, hosts):
    """The command in the first host, on an SQLite store of the test's own; what a failed test left running ends."""
    command = DetInHost(tmp_path / "store.sqlite", hosts)
    yield command
    for running in command.started:
        running.kill()
