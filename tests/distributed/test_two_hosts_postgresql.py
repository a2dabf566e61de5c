"""A search over two hosts records into one PostgreSQL store; the other host pauses and resumes it.

Two network namespaces (two_hosts_support.py), the team's PostgreSQL server in the first,
listening on its address, which the second reaches. ``experiment create --hosts A:1,B:1``
in the first runs the search's two trials at once, one on each host, every process writing
to the one store, given as a team sets it: ``DET_ESTIMATOR_STORE``, its URL holding the
password, which no command line on either host shows. From the second host, ``experiment
pause`` pauses the search and ``experiment resume`` runs it to COMPLETED; its ``describe
--json`` has the keys of the same search's on SQLite. A NumPy-free script of the Core API:
it runs on either stack (under horovodrun, or the TensorFlow launcher's ssh).
"""

import contextlib
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_module

HERE = Path(__file__).parent
SUPPORT = HERE.parent / "support"
RUN_TIMEOUT = 300
BATCHES = 60

two = load_module(HERE / "two_hosts_support.py")
postgres = load_module(SUPPORT / "postgres.py")
search_script = load_module(SUPPORT / "search_script.py")
cli = two.cli
hosts = two.hosts  # the fixture

pytestmark = [
    *two.requires_two_hosts,
    pytest.mark.timeout(4 * RUN_TIMEOUT),
    pytest.mark.skipif(bool(postgres.missing()), reason=postgres.missing() or "a PostgreSQL server can run here"),
]


class DetOnTeamStore(two.DetInHost):
    """The command in a host, on the store ``DET_ESTIMATOR_STORE`` names (a URL with its password), not ``--store``."""

    def env(self) -> dict[str, str]:
        env = {**super().env(), "DET_ESTIMATOR_STORE": str(self.store)}
        env.pop("PGPASSWORD", None)  # the URL's password alone
        return env

    def command(self, args: tuple) -> list[str]:
        return self.hosts.command_in(self.host, [cli.COMMAND, *map(str, args)])


@pytest.fixture
def team_url(hosts):
    """A database on a PostgreSQL server in the first host, on its address: its URL, with the password."""
    server = postgres.start_server(address=hosts.a.address, namespace=hosts.a.namespace)
    try:
        yield server.new_database("team")
    finally:
        server.stop()


def search_context(directory: Path, seconds_per_batch: float) -> Path:
    """A context dir holding the search script and its config, a random search of two trials; returns the config."""
    directory.mkdir()
    shutil.copy(SUPPORT / "search_script.py", directory / "search_script.py")
    config = {
        "name": "search",
        "entrypoint": "python3 search_script.py",
        "hyperparameters": {
            "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
            "seconds_per_batch": seconds_per_batch,
        },
        "searcher": {"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": BATCHES}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 1},
        "reproducibility": {"experiment_seed": 11},
        "max_restarts": 0,
    }
    path = directory / "search.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def keys(value):
    """The JSON value's keys, recursively (a list: each distinct shape of its items); no values."""
    if isinstance(value, dict):
        return {key: keys(item) for key, item in value.items()}
    if isinstance(value, list):
        shapes = []
        for shape in map(keys, value):
            if shape not in shapes:
                shapes.append(shape)
        return shapes
    return None


def command_lines(host) -> list[str]:
    """The command line of every process in ``host``'s namespace, as ``ps`` shows it."""
    lines = []
    for pid in host.pids():
        with contextlib.suppress(OSError):
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return lines


def wait_for_checkpoints_of_both_trials(det, running, timeout: float = RUN_TIMEOUT) -> None:
    """Until each trial (one on each host) has a checkpoint in the store; fails if the search ends first."""
    deadline = time.monotonic() + timeout
    while True:
        listed = det("checkpoint", "list", 1, "--json")  # exit 2 until the experiment is recorded
        if listed.returncode == 0 and len({checkpoint["trial_id"] for checkpoint in json.loads(listed.stdout)}) == 2:
            return
        if running.process.poll() is not None:
            ended = running.finish()
            pytest.fail(
                f"the search ended before both trials checkpointed:\n{ended.stdout[-3000:]}{ended.stderr[-3000:]}"
            )
        assert time.monotonic() < deadline, "the two trials wrote no checkpoint each in time"
        time.sleep(0.5)


def assert_trial_logs_from_either_host(on_a, on_b, trials: list[dict]) -> None:
    """``trial logs`` reads the same from both hosts, every run of each trial, whichever host it ran on.

    Read through the store's files folder on the shared file system today. Where the
    logs are kept in the database, this is the place to assert that they need no
    shared folder (the folder removed, say, before reading them).
    """
    for trial in trials:
        from_a, from_b = on_a.ok("trial", "logs", trial["id"]).stdout, on_b.ok("trial", "logs", trial["id"]).stdout
        assert from_a == from_b
        for run in range(1, len(trial["runs"]) + 1):
            assert f"--- det-estimator: run {run} of trial {trial['id']}" in from_a


def test_a_search_over_two_hosts_records_into_one_postgresql_store_that_the_other_host_pauses_and_resumes(
    hosts, team_url, tmp_path
):
    config = search_context(tmp_path / "search", seconds_per_batch=0.5)
    on_a, on_b = DetOnTeamStore(team_url, hosts, hosts.a), DetOnTeamStore(team_url, hosts, hosts.b)
    try:
        running = on_a.start("experiment", "create", config, config.parent, "--hosts", hosts.hosts)
        wait_for_checkpoints_of_both_trials(on_b, running)
        # Every process of the run, on both hosts, got the store without its password on its command line.
        password = postgres.PASSWORD
        seen = {host.namespace: command_lines(host) for host in (hosts.a, hosts.b)}
        assert any("search_script.py" in line for line in seen[hosts.b.namespace]), seen
        assert not [line for lines in seen.values() for line in lines if password in line]

        on_b.ok("experiment", "pause", 1)
        paused = running.finish(timeout=RUN_TIMEOUT)
        assert paused.returncode == 0, paused.stdout[-3000:] + paused.stderr[-3000:]
        assert on_b.json("experiment", "describe", 1)["state"] == "PAUSED"

        on_b.ok("experiment", "resume", 1, timeout=RUN_TIMEOUT)
    finally:
        for command in (on_a, on_b):
            for started in command.started:
                started.kill()
    described = on_a.json("experiment", "describe", 1)
    assert described["state"] == "COMPLETED"
    assert len(described["trials"]) == 2
    runs = [[run["state"] for run in trial["runs"]] for trial in described["trials"]]
    # The pause reached what still ran (a trial may have completed before it).
    assert ["PAUSED", "COMPLETED"] in runs and all(states[-1] == "COMPLETED" for states in runs), runs
    for trial in described["trials"]:
        last = trial["validations"][-1]
        assert last["batches"] == BATCHES
        assert last["metrics"]["loss"] == pytest.approx(search_script.loss(trial["hparams"]["x"], BATCHES))
    assert_trial_logs_from_either_host(on_a, on_b, described["trials"])

    # The same search on SQLite (at full speed, not paused): the same keys, all the way down.
    (tmp_path / "sqlite").mkdir()
    on_sqlite = two.DetInHost(tmp_path / "sqlite" / "store.sqlite", hosts)
    sqlite_config = search_context(tmp_path / "search-on-sqlite", seconds_per_batch=0.0)
    on_sqlite.ok(
        "experiment", "create", sqlite_config, sqlite_config.parent, "--hosts", hosts.hosts, timeout=RUN_TIMEOUT
    )
    assert keys(described) == keys(on_sqlite.json("experiment", "describe", 1))
