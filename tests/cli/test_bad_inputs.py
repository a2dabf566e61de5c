"""Every bad input of tests/support/bad_inputs.py gets its clear message and exit status, no traceback, no record.

The cases run in this process through ``det_estimator.cli.main`` (each would fail its
test by raising, if the command let an exception through); ``benchmarks/bad_inputs.py``
runs the same cases through the installed command.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from det_estimator import orchestration
from det_estimator.config import load_experiment_config
from det_estimator.launcher import parse_hosts
from det_estimator.store import ExperimentStore, MetricKind, State

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import bad_inputs  # noqa: E402
from command_in_process import record_one_experiment, run_command  # noqa: E402


@pytest.fixture(scope="module")
def store_with_one_experiment(tmp_path_factory) -> Path:
    """A store holding experiment 1 (COMPLETED) and its trial 1."""
    path = record_one_experiment(tmp_path_factory.mktemp("recorded"))
    with ExperimentStore(path) as store:
        store.set_state(1, State.COMPLETED)
    return path


def test_the_table_holds_at_least_sixty_distinct_bad_inputs():
    names = [case.name for case in bad_inputs.CASES]
    assert len(names) >= 60 and len(set(names)) == len(names)


# Cases whose entrypoint names a value of analytic_trial, which the command imports (an EstimatorTrial's module).
_IMPORTING_THE_ESTIMATOR_TRIAL = {"an entrypoint that is a function", "an entrypoint that is a value"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case.name, marks=[pytest.mark.estimator] * (case.name in _IMPORTING_THE_ESTIMATOR_TRIAL))
        for case in bad_inputs.CASES
    ],
)
def test_a_bad_input_gets_a_clear_error_and_changes_nothing(case, tmp_path, store_with_one_experiment):
    case.set_up(tmp_path)
    status, output = run_command(case.command_line(tmp_path, store_with_one_experiment))

    assert status == case.status, output
    assert case.message in output, output
    assert "Traceback" not in output, output
    # A refused experiment or job is never recorded, and no store is made for it.
    assert not (tmp_path / "new.sqlite").exists() and not (tmp_path / "new-files").exists()
    with ExperimentStore(store_with_one_experiment) as store:
        (experiment,) = store.experiments()
        assert experiment.state == State.COMPLETED


def test_resume_refuses_an_experiment_whose_host_cannot_be_reached(tmp_path):
    bad_inputs.BadInput("", (), "").set_up(tmp_path)
    path = tmp_path / "store.sqlite"
    with ExperimentStore(path) as store:
        config = load_experiment_config(bad_inputs.OK_CONFIG)
        experiment_id = orchestration.record_experiment(
            store, config, str(tmp_path), hosts=parse_hosts("gone.invalid:1")
        )
        store.set_state(experiment_id, State.PAUSED)

    status, output = run_command(["--store", str(path), "experiment", "resume", str(experiment_id)])

    assert status == 2, output
    assert "runs on --hosts gone.invalid:1: host 'gone.invalid' is not known" in output, output
    with ExperimentStore(path) as store:
        assert store.experiment(experiment_id).state == State.PAUSED
        (trial,) = store.trials(experiment_id)
        assert store.trial_runs(trial.id) == [] and trial.restarts == 0


@pytest.mark.parametrize("gone", ["the context dir", "the entrypoint module"])
def test_resume_refuses_an_experiment_whose_code_is_gone(tmp_path, gone):
    context = tmp_path / "context"
    bad_inputs.BadInput("", (), "").set_up(context)
    path = tmp_path / "store.sqlite"
    with ExperimentStore(path) as store:
        config = load_experiment_config(bad_inputs.OK_CONFIG)
        experiment_id = orchestration.record_experiment(store, config, str(context))
        store.set_state(experiment_id, State.PAUSED)
    if gone == "the context dir":
        shutil.rmtree(context)
        said = f"Experiment {experiment_id} runs its code in {context}, which is no longer a directory."
    else:
        (context / "analytic_trial.py").unlink()
        said = f"The config's entrypoint module 'analytic_trial' is not in CONTEXT_DIR {context}"

    status, output = run_command(["--store", str(path), "experiment", "resume", str(experiment_id)])

    assert status == 2, output
    assert said in output and "Put its code back there to resume it" in output, output
    with ExperimentStore(path) as store:
        assert store.experiment(experiment_id).state == State.PAUSED
        (trial,) = store.trials(experiment_id)
        assert store.trial_runs(trial.id) == [] and trial.restarts == 0


def test_create_refused_for_a_files_folder_of_another_store_leaves_no_experiment(tmp_path):
    bad_inputs.BadInput("", (), "").set_up(tmp_path)
    other = ExperimentStore(tmp_path / "other.sqlite")
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        store.files_dir.mkdir()
        (store.files_dir / ".det-estimator-store").write_text(
            f'{{"store_id": "{other.store_id}", "store_path": "{other.path}"}}\n', encoding="utf-8"
        )
        path = store.path
    other.close()

    status, output = run_command(
        ["--store", str(path), "experiment", "create", str(tmp_path / "ok.yaml"), str(tmp_path)]
    )

    assert status == 2, output
    assert f"The folder {tmp_path / 'store-files'} belongs to another det-estimator store, {other.path}" in output
    assert "Created experiment" not in output and "Traceback" not in output, output
    status, output = run_command(["--store", str(path), "experiment", "list"])
    assert (status, output) == (0, f"No experiments yet in {path}.\n")
    assert not (tmp_path / "checkpoints").exists()  # made by the check of the checkpoint storage, and removed


def test_json_output_writes_a_nan_metric_as_null(tmp_path):
    path = record_one_experiment(tmp_path)
    with ExperimentStore(path) as store:
        (trial,) = store.trials(1)
        run_id = store.start_run(trial.id)
        store.record_metrics(trial.id, MetricKind.VALIDATION, 10, {"auc": float("nan"), "loss": 0.5}, run_id=run_id)
    status, output = run_command(["--store", str(path), "experiment", "describe", "1", "--json"])
    assert status == 0, output
    described = json.loads(output)  # a bare NaN is not JSON: this would fail
    (validation,) = described["trials"][0]["validations"]
    assert validation["metrics"] == {"auc": None, "loss": 0.5}


@pytest.fixture
def no_default_store(monkeypatch, tmp_path) -> Path:
    """No --store, no DET_ESTIMATOR_STORE, and nothing yet where the default store would be."""
    monkeypatch.delenv("DET_ESTIMATOR_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "det-estimator" / "store.sqlite"


@pytest.mark.parametrize(
    ("argv", "said"), [(["experiment", "list"], "No experiments yet"), (["job", "list"], "No jobs yet")]
)
def test_listing_everything_before_the_default_store_exists_is_an_empty_list(no_default_store, argv, said):
    assert run_command(argv) == (0, f"{said}: there is no store at {no_default_store}.\n")
    assert run_command([*argv, "--json"]) == (0, "[]\n")
    assert not no_default_store.exists()


@pytest.mark.parametrize(
    "argv", [["trial", "list", "1"], ["checkpoint", "list", "1"], ["checkpoint", "list", "1", "--json"]]
)
def test_listing_an_experiments_trials_or_checkpoints_without_a_store_is_a_usage_error(no_default_store, argv):
    status, output = run_command(argv)
    assert status == 2 and f"There is no experiment store at {no_default_store}." in output, output
    assert not no_default_store.exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["experiment", "create", "{dir}/bad.yaml", "{dir}"], "unknown key `bogus`"),
        (["experiment", "create", "{dir}/ok.yaml", "{dir}/nowhere"], "CONTEXT_DIR {dir}/nowhere is not a directory"),
        (["job", "run", "{dir}/bad.yaml", "{dir}"], "bogus"),
    ],
)
def test_a_refused_create_or_job_makes_no_store_nor_its_folders(tmp_path, monkeypatch, no_default_store, argv, said):
    case = tmp_path / "case"
    bad_inputs.BadInput("", (), "", files={"bad.yaml": bad_inputs.config(bogus=1)}).set_up(case)
    argv = [part.format(dir=case) for part in argv]
    # A store named in a folder that exists; the default one, whose folders would be made.
    new = tmp_path / "store.sqlite"
    for command_line in (["--store", str(new), *argv], argv):
        status, output = run_command(command_line)
        assert status == 2 and said.format(dir=case) in output, output
    assert not new.exists() and not (tmp_path / "store-files").exists()
    assert not (tmp_path / "data").exists() and not no_default_store.exists()
    monkeypatch.setenv("DET_ESTIMATOR_STORE", str(new))
    assert run_command(argv)[0] == 2
    assert not new.exists()


def test_a_store_that_cannot_be_made_leaves_no_checkpoint_storage_made_for_the_experiment(tmp_path):
    bad_inputs.BadInput("", (), "").set_up(tmp_path)  # ok.yaml keeps its checkpoints in {dir}/checkpoints
    (tmp_path / "a-file").write_text("not a folder\n")
    store = tmp_path / "a-file" / "store.sqlite"

    status, output = run_command(
        ["--store", str(store), "experiment", "create", str(tmp_path / "ok.yaml"), str(tmp_path)]
    )

    assert status == 2 and f"--store {store}: {tmp_path / 'a-file'} is not a folder" in output, output
    assert not (tmp_path / "checkpoints").exists()


def test_a_store_on_a_read_only_file_system_is_said_to_be_unwritable(store_with_one_experiment, tmp_path):
    """SQLite says only "unable to open database file" there; the store itself is fine."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare, to mount a folder read-only in a namespace of its own")
    folder = tmp_path / "read-only"
    folder.mkdir()
    shutil.copy(store_with_one_experiment, folder / "store.sqlite")
    command = Path(sys.executable).with_name("det-estimator")
    script = (
        f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} && "
        f"exec {command} --store {folder / 'store.sqlite'} experiment list"
    )
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    if "mount" in result.stderr and "det-estimator" not in result.stderr:
        pytest.skip(f"cannot mount a folder read-only here: {result.stderr.strip()}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"The store {folder / 'store.sqlite'} cannot be written" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
