"""A throwaway PostgreSQL server for the tests: one cluster per test process, a fresh database per test.

The server is Debian's (scripts/setup_system.sh installs it): ``initdb`` makes a
cluster in a temporary folder and ``pg_ctl`` starts it on a free port of 127.0.0.1, with
password authentication over TCP, so that tests see what a team's server does. PostgreSQL
refuses to run as root: as root, the cluster belongs to the ``postgres`` user the package
made (or ``nobody``), and every server command runs as that user.

The tests' cluster trades durability for speed (no fsync), but loses nothing to a crash of
the server itself: :meth:`PostgresServer.kill` and :meth:`PostgresServer.start` let a test
take the server away and bring it back. A test of several hosts starts it inside one host's
network namespace, listening on that host's address (``start_server(address=..., namespace=...)``),
for the other hosts to reach it.
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator._pids import process_exists

SUPERUSER = "det_test"
PASSWORD = "det-test-secret"
_SERVER_USERS = ("postgres", "nobody")
# What the tests ask of the server: little memory, quick to start and stop, and (but for a
# benchmark's) no durability against a crash of the machine. A crash of the server alone
# (kill()) loses no commit it answered: each still reaches the kernel before its answer
# (synchronous_commit), without waiting for the disk (fsync).
_SERVER_SETTINGS = "-c shared_buffers=16MB -c max_connections=200"
_NOT_DURABLE = "-c fsync=off -c full_page_writes=off"


def server_bin_dir() -> Optional[Path]:
    """The folder of the newest installed server's programs (``initdb``, ``pg_ctl``), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> str:
    """Why no server can be started here, or "" if one can."""
    if server_bin_dir() is None:
        return "no PostgreSQL server (initdb): scripts/setup_system.sh installs Debian's postgresql as root"
    if os.geteuid() == 0 and not any(_user_exists(name) for name in _SERVER_USERS):
        return "running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as"
    return ""


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    """A running cluster of the tests' own: its programs, folder, port and superuser."""

    bin_dir: Path
    root: Path
    port: int
    run_as: Optional[pwd.struct_passwd]
    durable: bool = False
    # Where it listens, and the network namespace it runs in (None: this machine's own).
    address: str = "127.0.0.1"
    namespace: Optional[str] = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str, password: Optional[str] = PASSWORD, user: str = SUPERUSER) -> str:
        """``postgresql://user:password@ADDRESS:port/database``; ``password=None`` leaves it out."""
        credentials = user if password is None else f"{user}:{password}"
        return f"postgresql://{credentials}@{self.address}:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """Makes an empty database ``name`` and returns its URL (with the password)."""
        self._client("createdb", name)
        return self.url(name)

    def sql(self, database: str, statement: str) -> str:
        """Runs one statement with ``psql`` as the superuser; returns what it printed (unaligned, no headers)."""
        return self._client("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", statement)

    def start(self) -> None:
        """Starts the server (again, after :meth:`kill`) and waits until it takes connections."""
        self._server(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-o",
            f"-p {self.port} -k {self.root} -c listen_addresses={self.address} {_SERVER_SETTINGS}"
            f"{'' if self.durable else ' ' + _NOT_DURABLE}",
            "-w",
            "-t",
            "60",
            "start",
        )

    def kill(self) -> None:
        """Ends the server at once, as a crash would (SIGKILL to the postmaster; its children follow)."""
        pid_file = self.data_dir / "postmaster.pid"
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, 9)
        deadline = time.monotonic() + 30
        while process_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        # Its backends end when they see the postmaster gone; a new postmaster waits for them
        # through the shared memory lock, so wait here until they have (seen from this
        # machine's network: a server in a namespace is not, and no test kills one).
        while self.namespace is None and _port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        """Stops the server (immediately: the tests' data is thrown away) and removes its folder."""
        if (self.data_dir / "postmaster.pid").exists():
            self._server("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _client(self, program: str, *args: str) -> str:
        environment = {**os.environ, "PGPASSWORD": PASSWORD}
        command = [str(self.bin_dir / program), "-h", self.address, "-p", str(self.port), "-U", SUPERUSER, *args]
        command = [*self._in_namespace(), *command]
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def _in_namespace(self) -> list[str]:
        """What runs a command in the server's network namespace (as root, who may enter it)."""
        return [] if self.namespace is None else ["ip", "netns", "exec", self.namespace]

    def _server(self, program: str, *args: str, check: bool = True) -> None:
        command = [str(self.bin_dir / program), *args]
        run_as = {} if self.run_as is None else {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid}
        if self.namespace is not None and self.run_as is not None:
            # Enter the namespace as root first, then become the server's user.
            ids = ["--reuid", str(self.run_as.pw_uid), "--regid", str(self.run_as.pw_gid), "--clear-groups"]
            command, run_as = [*self._in_namespace(), "setpriv", *ids, *command], {}
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
            extra_groups=[] if run_as else None,
            **run_as,
        )
        if check and done.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}\n{log}")


def start_server(durable: bool = False, address: str = "127.0.0.1", namespace: Optional[str] = None) -> PostgresServer:
    """Makes a cluster in a new temporary folder and starts it; the caller stops it.

    Args:
        durable: commits wait for the disk, as on a team's server (a benchmark's); by
            default they do not, which the tests do not need.
        address: where it listens; clients of its network (``samenet``) may log in.
        namespace: the network namespace it runs in, whose address ``address`` is (as root).
    """
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise RuntimeError(missing())
    run_as = None
    if os.geteuid() == 0:
        run_as = next(pwd.getpwnam(name) for name in _SERVER_USERS if _user_exists(name))
    root = Path(tempfile.mkdtemp(prefix="det-estimator-postgres-"))
    if run_as is not None:
        os.chown(root, run_as.pw_uid, run_as.pw_gid)
    server = PostgresServer(bin_dir, root, _free_port(), run_as, durable, address, namespace)
    try:
        password_file = root / "password"
        password_file.write_text(PASSWORD + "\n")
        if run_as is not None:
            os.chown(password_file, run_as.pw_uid, run_as.pw_gid)
        server._server(
            "initdb",
            "-D",
            str(server.data_dir),
            "-U",
            SUPERUSER,
            f"--pwfile={password_file}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        if address != "127.0.0.1":
            # initdb lets in only the loopback addresses over TCP; the other hosts come from the server's network.
            with open(server.data_dir / "pg_hba.conf", "a", encoding="utf-8") as rules:
                rules.write("host all all samenet scram-sha-256\n")
        server.start()
    except BaseException:
        server.stop()
        raise
    return server


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0
