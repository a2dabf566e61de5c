"""start_processes: the one place a run's processes (a trial's or a job's) are started."""

import sys

from det_estimator import _info
from det_estimator.orchestration._processes import start_processes

# Prints what a launched process reads of its run, then fails as asked.
_SHOW = (
    "import os, sys\n"
    "from det_estimator import _info\n"
    "info = _info.get_cluster_info()\n"
    "print(info.task_type, info.user_data['n'], os.environ['DET_CHIEF_IP'], os.environ['GIVEN'], flush=True)\n"
    "print('port', os.environ['DET_CHIEF_PORT'].isdigit(), os.environ['PYTHONUNBUFFERED'], flush=True)\n"
    "sys.exit(int(sys.argv[1]))\n"
)


def test_the_processes_get_the_runs_info_and_environment_and_hand_on_every_line(tmp_path):
    info = _info.ClusterInfo("BATCH_INFERENCE", None, None, {"n": 3}, str(tmp_path / "store.sqlite"), "")
    lines = []

    processes = start_processes(
        info, [sys.executable, "-c", _SHOW, "4"], str(tmp_path), tmp_path, lines.append, environment={"GIVEN": "yes"}
    )

    assert processes.wait() == 4 and processes.poll() == 4
    assert lines == ["BATCH_INFERENCE 3 127.0.0.1 yes\n", "port True 1\n"]
    assert _info.ClusterInfo.from_json((tmp_path / "info.json").read_text()) == info
    processes.kill()  # ended already: nothing to do


def test_the_runs_info_file_is_readable_by_its_user_alone(tmp_path):
    # It names the store, which may be a database URL holding its password.
    store = "postgresql://bob:s3cret@db.example/team"
    info = _info.ClusterInfo("BATCH_INFERENCE", None, None, {}, store, "")
    (tmp_path / "info.json").write_text("an older file, readable by all")
    (tmp_path / "info.json").chmod(0o644)

    info.write(tmp_path / "info.json")

    assert (tmp_path / "info.json").stat().st_mode & 0o777 == 0o600
    assert _info.ClusterInfo.from_json((tmp_path / "info.json").read_text()).store_path == store
