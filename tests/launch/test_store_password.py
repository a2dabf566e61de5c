"""A PostgreSQL store's password reaches a run's processes in a file, never on a command line that `ps` shows."""

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from det_estimator.launcher import ProcessSpec, holds_store_password, without_store_password
from det_estimator.launcher._job import _ssh_command

URL = "postgresql://me:s3:cr\\et@db.example:5433/team?sslmode=require"


def test_the_command_line_of_a_process_on_another_host_holds_no_password(tmp_path):
    env = {"DET_ESTIMATOR_STORE": URL, "PGPASSWORD": "for-the-rest", "HOME": str(tmp_path)}
    spec = ProcessSpec(1, "other", ["python3", "train.py"])
    assert "s3:cr" in _ssh_command(spec, "/work", env)[-1]  # what horovodrun and ssh would show

    moved = without_store_password(env, tmp_path)
    remote = _ssh_command(spec, "/work", moved)[-1]
    assert "s3" not in remote and "for-the-rest" not in remote
    assert moved["DET_ESTIMATOR_STORE"] == "postgresql://me@db.example:5433/team?sslmode=require"
    assert "PGPASSWORD" not in moved and moved["PGPASSFILE"] == str(tmp_path / "store.pgpass")
    passfile = Path(moved["PGPASSFILE"])
    assert stat.S_IMODE(passfile.stat().st_mode) == 0o600  # libpq reads no file that others may
    # libpq's format, its separator and escape escaped: the store's line, then PGPASSWORD's for any other.
    assert passfile.read_text().splitlines() == ["db.example:5433:team:me:s3\\:cr\\\\et", "*:*:*:*:for-the-rest"]


def test_what_the_processes_would_have_read_before_they_still_read(tmp_path):
    (tmp_path / ".pgpass").write_text("other.example:5432:*:me:theirs\n")
    (tmp_path / ".pgpass").chmod(0o600)
    moved = without_store_password(
        {"DET_ESTIMATOR_STORE": "postgresql://me:mine@db/team", "HOME": str(tmp_path)}, tmp_path
    )
    assert Path(moved["PGPASSFILE"]).read_text().splitlines() == ["db:*:team:me:mine", "other.example:5432:*:me:theirs"]
    # Nothing to move: the environment as it was, and no file.
    for env in [
        {"DET_ESTIMATOR_STORE": "postgresql://me@db/team"},
        {"DET_ESTIMATOR_STORE": str(tmp_path / "s.sqlite")},
    ]:
        assert not holds_store_password(env)
        assert without_store_password(env, tmp_path / "none") == env
    assert not (tmp_path / "none").exists()


# Each process records into the store of DET_ESTIMATOR_STORE, and says what it was given.
CORE_SCRIPT = textwrap.dedent(
    """
    import os
    import det_estimator as det
    from det_estimator.store import ExperimentStore

    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
        with ExperimentStore() as store:  # DET_ESTIMATOR_STORE's, opened by each process itself
            count = len(store.experiments())
        print(f"RANK {core_context.distributed.rank} STORE {os.environ['DET_ESTIMATOR_STORE']} HOLDS {count}")
    """
)


def test_a_process_started_over_ssh_opens_a_postgresql_store_from_the_password_file(tmp_path, postgres_url):
    # An `ssh` that logs its command line and runs the remote command here: 127.0.0.2 is another host to the launcher.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path / "ssh.log"}\nfor last; do :; done\nexec sh -c "$last"\n'
    )
    (bin_dir / "ssh").chmod(0o755)
    (tmp_path / "script.py").write_text(CORE_SCRIPT)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DET_ESTIMATOR_STORE": postgres_url}
    env.pop("PGPASSWORD", None)
    command = [sys.executable, "-m", "det_estimator.launch.tensorflow", "--hosts", "localhost:1,127.0.0.2:1"]
    result = subprocess.run(
        [*command, "--", "python3", "script.py"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    password = postgres_url.split(":")[2].split("@")[0]
    bare = postgres_url.replace(f":{password}@", "@")
    # Each opened the store by the URL without its password: libpq found it in the file.
    assert f"RANK 1 STORE {bare} HOLDS 1" in result.stdout and f"RANK 0 STORE {bare} HOLDS 1" in result.stdout
    ssh = (tmp_path / "ssh.log").read_text()
    assert "127.0.0.2" in ssh and password not in ssh
    assert not list(tmp_path.glob(".det-estimator-launch-*"))  # the file went with the job
    from det_estimator.store import ExperimentStore

    with ExperimentStore(postgres_url) as store:
        (experiment,) = store.experiments()
        assert (experiment.state, experiment.slots) == ("COMPLETED", 2)
