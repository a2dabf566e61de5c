"""``det-estimator experiment|checkpoint|trial ...`` end to end, on the analytic trial."""

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from det_estimator.store import ExperimentStore, State

LEARNING_RATE, GLOBAL_BATCH = 0.01, 8
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# A first run slow enough for a pause to land mid-run (35 batches, 7 s, after the first
# checkpoint); the resumed run goes at full speed.
SLOW_BATCHES = 40
SLOW = {"seconds_per_batch": 0.2, "resumed_at_full_speed": True}


def created_id(output: str) -> int:
    match = re.search(r"^Created experiment (\d+) \(trial (\d+)\)", output, re.MULTILINE)
    assert match, f"no 'Created experiment' line in:\n{output}"
    return int(match.group(1))


def assert_usage_error(result, *fragments: str) -> None:
    """Exit status 2 and a ``det-estimator: error:`` message holding each fragment."""
    assert result.returncode == 2, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.stderr.startswith("det-estimator: error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def assert_weights_follow_the_closed_form(analytic, validations, learning_rate=LEARNING_RATE) -> None:
    for validation in validations:
        expected = analytic.expected_weight(validation["batches"], learning_rate, GLOBAL_BATCH)
        assert validation["metrics"]["weight"] == pytest.approx(expected, rel=1e-5), validation


def scalars(event_dir: Path, tag: str) -> dict[int, float]:
    """``tag``'s values by step in the TensorBoard event files of a directory."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    values = {}
    for path in sorted(event_dir.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    kind = value.WhichOneof("value")
                    values[event.step] = value.simple_value if kind == "simple_value" else value.tensor.float_val[0]
    return values


# Under pytest-xdist, the whole module on one test process, and `completed` session-scoped:
# other modules' tests may run between these, which would end a module-scoped fixture.
pytestmark = pytest.mark.xdist_group("cli_experiment_commands")


@pytest.fixture(scope="session")
def completed(make_det, make_context, tmp_path_factory):
    """A 20-batch experiment created and run to completion once for the whole module."""
    root = tmp_path_factory.mktemp("completed")
    det, context = make_det(root / "store.sqlite"), make_context(root / "context")
    result = det.ok("experiment", "create", context.write_config(20), context.directory)
    experiment_id = created_id(result.stdout)
    return det, context, experiment_id, result


# 1. A completed experiment, seen through every command.


def test_create_shows_progress_validations_and_a_summary(completed):
    det, context, experiment_id, result = completed
    lines = result.stdout.splitlines()
    assert lines[0] == f"Created experiment {experiment_id} (trial 1) in {det.store}"
    # Not a terminal: one plain line per workload, validation and checkpoint.
    progress = [line for line in lines if re.match(r"\[[#.]{20}\] batches \d+/20 ", line)]
    assert [re.search(r"batches (\d+)/20", line).group(1) for line in progress] == ["5", "10", "15", "20"]
    assert progress[-1].startswith("[####################] batches 20/20 (100%)  loss ")
    assert re.search(r"\d+\.\d batches/s  about \d+ s left$", progress[-1])
    validations = [line for line in lines if line.startswith("validation after ")]
    assert [re.search(r"after (\d+) batches", line).group(1) for line in validations] == ["5", "10", "15", "20"]
    checkpoints = [line for line in lines if re.fullmatch(r"checkpoint [0-9a-f]{32} after \d+ batches", line)]
    assert len(checkpoints) == 4
    # Progress comes from the store, not from the trial's output, which is in its log only.
    assert not any("WARNING" in line or "tensorflow" in line.lower() for line in lines)
    assert f"Experiment {experiment_id} COMPLETED after 20 batches." in lines
    (best,) = [line for line in lines if line.startswith("Best validation:")]
    assert re.fullmatch(r"Best validation: loss [0-9.]+ after 20 batches\.", best)
    assert "Checkpoints kept (1):" in lines
    checkpoints = det.json("checkpoint", "list", experiment_id)
    (checkpoint,) = checkpoints
    assert f"  {checkpoint['uuid']}  batches 20  {checkpoint['path']}" in lines
    (saved_model_line,) = [line for line in lines if "SavedModel" in line]
    saved_model = Path(saved_model_line.split("SavedModel 'raw': ", 1)[1])
    assert saved_model == Path(checkpoint["path"]) / "raw"
    assert (saved_model / "saved_model.pb").is_file()
    assert result.stderr == ""


def test_list_shows_the_experiment_completed_with_its_best_validation(completed):
    det, context, experiment_id, _ = completed
    (experiment,) = det.json("experiment", "list")
    assert experiment["id"] == experiment_id
    assert experiment["state"] == "COMPLETED"
    assert (experiment["batches_trained"], experiment["max_batches"]) == (20, 20)
    assert experiment["context_dir"] == str(context.directory.resolve())
    assert experiment["best_validation"]["metric"] == "loss"
    assert experiment["best_validation"]["batches"] == 20
    table = det.ok("experiment", "list").stdout
    assert re.search(rf"^\s*{experiment_id}\s+analytic\s+COMPLETED\s+1\s+20/20\s", table, re.MULTILINE), table


def test_describe_has_the_config_hparams_validations_and_training_metrics(completed, analytic):
    det, context, experiment_id, _ = completed
    described = det.json("experiment", "describe", experiment_id)
    assert described["state"] == "COMPLETED"
    assert described["config"]["entrypoint"] == "analytic_trial:AnalyticTrial"
    assert described["config"]["searcher"]["max_length"] == {"batches": 20}
    (trial,) = described["trials"]
    assert trial["hparams"] == {"global_batch_size": 8, "learning_rate": 0.01, "events_dir": "events"}
    assert trial["seed"] == 1 and trial["state"] == "COMPLETED"
    assert [v["batches"] for v in trial["validations"]] == [5, 10, 15, 20]
    assert_weights_follow_the_closed_form(analytic, trial["validations"])
    assert all(v["metrics"]["records"] == analytic.NUM_RECORDS for v in trial["validations"])
    assert [t["batches"] for t in trial["training"]] == [5, 10, 15, 20]
    expected_losses = analytic.expected_workload_losses(20, 5, LEARNING_RATE, GLOBAL_BATCH)
    assert [t["metrics"]["loss"] for t in trial["training"]] == pytest.approx(expected_losses, rel=1e-5)
    assert described["best_validation"]["value"] == pytest.approx(trial["validations"][-1]["metrics"]["loss"])
    text = det.ok("experiment", "describe", experiment_id).stdout
    assert "State:       COMPLETED" in text and "Validations:" in text


def test_checkpoint_list_gives_the_kept_checkpoints_and_all_shows_the_deleted(completed):
    det, context, experiment_id, _ = completed
    (kept,) = det.json("checkpoint", "list", experiment_id)
    assert kept["batches"] == 20 and kept["state"] == "COMPLETED"
    assert re.fullmatch(r"[0-9a-f]{32}", kept["uuid"])
    assert Path(kept["path"]).is_dir() and Path(kept["path"]).name == kept["uuid"]
    assert Path(kept["path"]).is_relative_to(context.directory.resolve() / "checkpoints")
    assert kept["size_bytes"] > 0
    assert kept["size_bytes"] == sum(p.stat().st_size for p in Path(kept["path"]).rglob("*") if p.is_file())

    every = det.json("checkpoint", "list", experiment_id, "--all")
    assert [c["batches"] for c in every] == [5, 10, 15, 20]
    assert [c["state"] for c in every] == ["DELETED", "DELETED", "DELETED", "COMPLETED"]
    assert every[-1] == kept
    assert len({c["uuid"] for c in every}) == 4
    for deleted in every[:-1]:
        assert not Path(deleted["path"]).exists()
        assert deleted["size_bytes"] > 0

    table = det.ok("checkpoint", "list", experiment_id, "--all").stdout
    header = ["UUID", "TRIAL", "BATCHES", "STATE", "KEPT", "AS", "VALIDATION", "METRICS", "SIZE", "PATH"]
    assert table.splitlines()[0].split() == header
    assert table.count("DELETED") == 3 and kept["uuid"] in table


def test_trial_logs_print_the_whole_output(completed):
    det, _, experiment_id, result = completed
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    logs = det.ok("trial", "logs", trial["id"]).stdout
    assert logs == Path(trial["log_path"]).read_text(encoding="utf-8")
    assert "tensorflow" in logs.lower()  # TensorFlow's own output is in the log only
    assert "tensorflow" not in result.stdout.lower()
    assert Path(trial["log_path"]).is_relative_to(det.store.parent / "store-files")


def test_tensorboard_event_files_hold_training_and_validation_metrics(completed, analytic):
    det, _, experiment_id, _ = completed
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    tensorboard = Path(trial["tensorboard_dir"])
    assert list((tensorboard / "training").glob("events.out.tfevents.*"))
    assert list((tensorboard / "validation").glob("events.out.tfevents.*"))
    weights = scalars(tensorboard / "validation", "weight")
    assert sorted(weights) == [5, 10, 15, 20]
    for batches, weight in weights.items():
        assert weight == pytest.approx(analytic.expected_weight(batches, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)
    assert sorted(scalars(tensorboard / "training", "loss")) == [5, 10, 15, 20]


def test_plot_writes_a_png_of_the_learning_curves(completed, tmp_path):
    det, _, experiment_id, _ = completed
    output = tmp_path / "curves.png"
    reported = det.json("experiment", "plot", experiment_id, "-o", output)
    assert reported["id"] == experiment_id
    assert Path(reported["output"]) == output.resolve()
    assert {"loss", "weight"} <= set(reported["panels"])
    assert "global_step" not in reported["panels"]
    assert output.read_bytes()[:8] == PNG_MAGIC

    again = tmp_path / "plots" / "again.png"
    text = det.ok("experiment", "plot", experiment_id, "-o", again).stdout
    curves = "a learning curve" if len(reported["panels"]) == 1 else f"{len(reported['panels'])} learning curves"
    assert text.startswith(f"Wrote {curves} (") and str(again) in text
    assert again.read_bytes()[:8] == PNG_MAGIC


def test_the_store_can_be_named_by_the_environment(completed):
    det, _, experiment_id, _ = completed
    result = subprocess.run(
        [det.command(())[0], "experiment", "list", "--json"],
        capture_output=True,
        text=True,
        env=dict(det.env(), DET_ESTIMATOR_STORE=str(det.store)),
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert [e["id"] for e in json.loads(result.stdout)] == [experiment_id]


# 2. Pause and resume.


@pytest.fixture(scope="session")
def paused_and_resumed_twice(make_det, make_context, tmp_path_factory):
    """An experiment paused by the command, then resumed by two commands at once; what each said, and the store's
    view in between. The two tests below assert on it: one resume runs it (the first), the other is refused."""
    root = tmp_path_factory.mktemp("paused")
    det, context = make_det(root / "store.sqlite"), make_context(root / "context")
    try:
        running = det.start("experiment", "create", context.write_config(SLOW_BATCHES, hparams=SLOW), context.directory)
        experiment_id = created_id(running.wait_for("Created experiment"))
        running.wait_for("checkpoint ")
        paused = det.ok("experiment", "pause", experiment_id)
        created = running.finish()
        experiment, checkpoints = det.experiment(experiment_id), det.json("checkpoint", "list", experiment_id)
        resumes = det.start("experiment", "resume", experiment_id), det.start("experiment", "resume", experiment_id)
        results = sorted((resume.finish() for resume in resumes), key=lambda result: result.returncode)
    finally:
        for started in det.started:
            started.kill()
    return SimpleNamespace(
        det=det,
        experiment_id=experiment_id,
        paused=paused,
        created=created,
        paused_experiment=experiment,
        paused_checkpoints=checkpoints,
        resumes=results,
    )


def test_a_paused_experiment_resumes_without_losing_anything(paused_and_resumed_twice, analytic):
    det, experiment_id = paused_and_resumed_twice.det, paused_and_resumed_twice.experiment_id
    assert f"Experiment {experiment_id} is PAUSED." in paused_and_resumed_twice.paused.stdout
    created = paused_and_resumed_twice.created
    assert created.returncode == 0, created.stdout + created.stderr
    # The hint names the store, which is not the default one: pasted into the shell, it resumes this experiment.
    assert f"Resume with: det-estimator --store {det.store} experiment resume {experiment_id}" in created.stdout
    assert f"Experiment {experiment_id} PAUSED after " in created.stdout

    experiment = paused_and_resumed_twice.paused_experiment
    assert experiment["state"] == "PAUSED"
    stopped_at = experiment["batches_trained"]
    assert 0 < stopped_at < SLOW_BATCHES
    # The pause wrote a checkpoint where the trial stopped.
    pause_checkpoint = paused_and_resumed_twice.paused_checkpoints[-1]
    assert pause_checkpoint["batches"] == stopped_at

    resumed = paused_and_resumed_twice.resumes[0]  # the resume that ran it
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"Resuming experiment {experiment_id}" in resumed.stdout
    assert f"batches {SLOW_BATCHES}/{SLOW_BATCHES} (100%)" in resumed.stdout
    assert f"Experiment {experiment_id} COMPLETED after {SLOW_BATCHES} batches." in resumed.stdout

    experiment = det.experiment(experiment_id)
    assert experiment["state"] == "COMPLETED"
    assert experiment["batches_trained"] == SLOW_BATCHES
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    validations = trial["validations"]
    assert validations[-1]["batches"] == SLOW_BATCHES
    assert validations[-1]["metrics"]["weight"] == pytest.approx(
        analytic.expected_weight(SLOW_BATCHES, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5
    )
    assert_weights_follow_the_closed_form(analytic, validations)
    assert [v["batches"] for v in validations] == sorted({v["batches"] for v in validations})
    assert any(v["batches"] > stopped_at for v in validations)
    # The trial's two runs are recorded, and the one log holds the output of both.
    assert [run["state"] for run in trial["runs"]] == ["PAUSED", "COMPLETED"]
    log = Path(trial["log_path"]).read_text(encoding="utf-8")
    headers = [line for line in log.splitlines() if line.startswith("--- det-estimator: run ")]
    assert len(headers) == 2 and "from the start" in headers[0]
    assert headers[1].endswith(f"from checkpoint {pause_checkpoint['uuid']} ---")


def test_a_resume_whose_latest_checkpoint_was_deleted_by_hand_says_so_and_where_it_goes_on_from(det, context):
    config = context.write_config(
        20,
        hparams={"crash": {"rank": 0, "batch": 12}},  # each run fails at its 12th batch
        min_checkpoint_period={"batches": 5},
        checkpoint_storage={"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 5},
    )
    created = det("experiment", "create", config, context.directory)
    assert created.returncode == 1, created.stdout + created.stderr
    experiment_id = created_id(created.stdout)
    first, latest = det.json("checkpoint", "list", experiment_id)
    assert (first["batches"], latest["batches"]) == (5, 10)
    shutil.rmtree(latest["path"])

    resumed = det("experiment", "resume", experiment_id)

    assert resumed.returncode == 1, resumed.stdout + resumed.stderr  # its run fails at its 12th batch again
    assert (
        f"The latest checkpoint of trial {latest['trial_id']}, {latest['uuid']} after 10 batches, is gone: "
        f"{latest['path']} no longer exists. Trial {latest['trial_id']} resumes from checkpoint {first['uuid']} "
        "after 5 batches instead" in resumed.stderr
    ), resumed.stderr
    assert "resumed after 5 batches" in resumed.stdout
    listed = det.json("checkpoint", "list", experiment_id, "--all")
    assert [(c["batches"], c["state"]) for c in listed if c["uuid"] == latest["uuid"]] == [(10, "DELETED")]


def test_save_trial_latest_0_keeps_the_latest_checkpoint_until_the_experiment_completes(det, context):
    # smaller_is_better: false makes the first checkpoint the best, so that best and latest differ.
    config = context.write_config(
        SLOW_BATCHES,
        hparams=SLOW,
        searcher={"name": "single", "metric": "loss", "smaller_is_better": False, "max_length": {"batches": 40}},
        checkpoint_storage={"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 0},
    )
    running = det.start("experiment", "create", config, context.directory)
    experiment_id = created_id(running.wait_for("Created experiment"))
    running.wait_for("checkpoint ")
    det.ok("experiment", "pause", experiment_id)
    assert running.finish().returncode == 0
    paused = det.json("checkpoint", "list", experiment_id)
    stopped_at = det.experiment(experiment_id)["batches_trained"]
    # The pause's checkpoint stays, to resume from: it is neither the best nor kept by save_trial_latest.
    assert [c["batches"] for c in paused] == [5, stopped_at] and stopped_at > 5

    resumed = det.ok("experiment", "resume", experiment_id)
    assert "Deleted 1 checkpoint that checkpoint_storage keeps only while the experiment runs" in resumed.stdout
    (kept,) = det.json("checkpoint", "list", experiment_id)
    assert kept["batches"] == 5 and Path(kept["path"]).is_dir()
    latest = det.json("checkpoint", "list", experiment_id, "--all")[-1]
    assert latest["batches"] == 40 and latest["state"] == "DELETED" and not Path(latest["path"]).exists()


def test_ctrl_c_pauses_the_experiment(det, context):
    config = context.write_config(SLOW_BATCHES, hparams=SLOW)
    running = det.start("experiment", "create", config, context.directory)
    experiment_id = created_id(running.wait_for("Created experiment"))
    running.wait_for("checkpoint ")

    os.killpg(running.process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    time.sleep(0.5)
    os.killpg(running.process.pid, signal.SIGINT)  # an impatient second Ctrl-C changes nothing
    created = running.finish()
    assert created.returncode == 0, created.stdout + created.stderr
    assert "failed" not in created.stdout + created.stderr
    assert created.stdout.count("Pausing: the trial finishes its batch and writes a checkpoint") == 1
    # The hint names the store, which is not the default one: pasted into the shell, it resumes this experiment.
    assert f"Resume with: det-estimator --store {det.store} experiment resume {experiment_id}" in created.stdout
    assert "Traceback" not in created.stdout + created.stderr
    experiment = det.experiment(experiment_id)
    assert experiment["state"] == "PAUSED"
    assert 0 < experiment["batches_trained"] < SLOW_BATCHES


# A trial stuck in build_estimator the first time (as a process hung before its first
# collective): it never sees a pause request. It writes its pid first, for the test to watch.
STUCK_TRIAL = """
import os
import time
from pathlib import Path

from analytic_trial import AnalyticTrial


class StuckTrial(AnalyticTrial):
    def build_estimator(self):
        stuck = Path("stuck.pid")
        if not stuck.exists():
            stuck.write_text(str(os.getpid()))
            while True:
                time.sleep(1)
        return super().build_estimator()
"""


def test_ctrl_c_again_stops_a_pause_that_cannot_finish(det, context, analytic):
    (context.directory / "stuck_trial.py").write_text(STUCK_TRIAL, encoding="utf-8")
    config = context.write_config(20, entrypoint="stuck_trial:StuckTrial")
    running = det.start("experiment", "create", config, context.directory)
    experiment_id = created_id(running.wait_for("Created experiment"))
    stuck = context.directory / "stuck.pid"
    deadline = time.monotonic() + 120
    while not stuck.exists() or not stuck.read_text():
        assert time.monotonic() < deadline and running.process.poll() is None, running.output
        time.sleep(0.2)
    pid = int(stuck.read_text())

    os.killpg(running.process.pid, signal.SIGINT)
    running.wait_for("Pausing: ")
    running.wait_for("Ctrl-C again stops the trial at once", timeout=60)
    os.killpg(running.process.pid, signal.SIGINT)
    created = running.finish(timeout=60)
    assert created.returncode == 0, created.stdout + created.stderr
    assert "Stopping now" in created.stdout and "failed" not in created.stdout + created.stderr
    with pytest.raises(ProcessLookupError):  # the stuck process is gone too
        os.kill(pid, 0)
    assert det.experiment(experiment_id)["state"] == "PAUSED"
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    assert [run["state"] for run in trial["runs"]] == ["PAUSED"]

    # The resume starts over (there was no checkpoint yet) and is no longer stuck.
    det.ok("experiment", "resume", experiment_id)
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    assert trial["validations"][-1]["metrics"]["weight"] == pytest.approx(
        analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5
    )


def test_ctrl_c_pauses_the_experiment_also_when_it_ends_the_reader_of_its_output(det, context, analytic):
    # `det-estimator ... | tee log` and Ctrl-C: the terminal signals both, and tee is gone first.
    config = context.write_config(SLOW_BATCHES, hparams=SLOW)
    process = subprocess.Popen(
        det.command(("experiment", "create", config, context.directory)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=det.env(),
        start_new_session=True,
    )
    try:
        lines = []
        while not any(line.startswith("checkpoint ") for line in lines):
            line = process.stdout.readline()
            assert line, "the command ended before its first checkpoint:\n" + "".join(lines)
            lines.append(line)
        process.stdout.close()
        os.killpg(process.pid, signal.SIGINT)
        _, errors = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, errors
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
    experiment = det.experiment(created_id("".join(lines)))
    assert experiment["state"] == "PAUSED" and 0 < experiment["batches_trained"] < SLOW_BATCHES
    # Nothing was lost: the resume ends where an uninterrupted run does.
    det("experiment", "resume", experiment["id"])
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    weight = trial["validations"][-1]["metrics"]["weight"]
    assert weight == pytest.approx(analytic.expected_weight(SLOW_BATCHES, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)


def test_two_resumes_of_one_paused_experiment_at_once_run_it_once(paused_and_resumed_twice):
    det, experiment_id = paused_and_resumed_twice.det, paused_and_resumed_twice.experiment_id
    results = paused_and_resumed_twice.resumes
    assert [result.returncode for result in results] == [0, 2], [r.stdout + r.stderr for r in results]
    refusal = results[1].stderr  # the second finds the first running, or about to (it holds the claim)
    assert f"Experiment {experiment_id} is being run by process" in refusal or "is ACTIVE: it is running" in refusal
    assert f"Experiment {experiment_id} COMPLETED after {SLOW_BATCHES} batches." in results[0].stdout

    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    batches = [validation["batches"] for validation in trial["validations"]]
    assert batches == sorted(set(batches)), "a validation was recorded twice"
    assert [run["state"] for run in trial["runs"]] == ["PAUSED", "COMPLETED"]
    for checkpoint in det.json("checkpoint", "list", experiment_id):  # the store agrees with the disk
        assert Path(checkpoint["path"]).is_dir(), checkpoint


# 3. Errors. What the command says about its input runs it in this process (det.here): the
# console script is what the other tests run. Its warnings are Python's, so that test runs it.


def test_a_missing_config_file_is_a_usage_error(det, context):
    result = det.here("experiment", "create", context.directory / "missing.yaml", context.directory)
    assert_usage_error(result, f"CONFIG {context.directory / 'missing.yaml'} is not a file.")


def test_config_and_context_dir_given_the_other_way_round_are_said_to_be(det, context):
    config = context.write_config()
    result = det.here("experiment", "create", context.directory, config)
    assert_usage_error(
        result,
        f"CONTEXT_DIR {config} is not a directory. It looks like CONFIG, and {context.directory} like CONTEXT_DIR: "
        "the config comes first (experiment create CONFIG CONTEXT_DIR).",
    )
    result = det.here("job", "run", context.directory, config)
    assert_usage_error(result, "the config comes first (job run CONFIG CONTEXT_DIR).")


def test_a_config_named_from_its_context_dir_is_pointed_at(det, context):
    config = context.write_config()  # config.yaml, in CONTEXT_DIR: not in the current directory
    result = det.here("experiment", "create", config.name, context.directory)
    assert_usage_error(
        result,
        f"CONFIG config.yaml is not a file. CONFIG is named from the current directory ({Path.cwd()}), not from "
        f"CONTEXT_DIR: did you mean {os.path.relpath(config)}?",
    )
    job = context.directory / "job.yaml"
    job.write_text("entrypoint_script: python3 absent.py\ndata: {}\n")
    result = det.here("job", "run", "job.yaml", context.directory)
    assert_usage_error(result, "CONFIG job.yaml is not a file. CONFIG is named from the current directory")


def test_a_context_dir_that_is_not_a_directory_is_a_usage_error(det, context, tmp_path):
    config = context.write_config()
    result = det.here("experiment", "create", config, tmp_path / "nowhere")
    assert_usage_error(result, f"CONTEXT_DIR {tmp_path / 'nowhere'} is not a directory.")
    result = det.here("experiment", "create", config, config)
    assert_usage_error(result, f"CONTEXT_DIR {config} is not a directory.")


@pytest.mark.parametrize(
    "change, key_path",
    [
        (lambda config: config.update(bogus_key=1), "`bogus_key`. "),
        (
            lambda config: config["checkpoint_storage"].update(hots_path="x"),
            "`checkpoint_storage.hots_path` (did you mean `host_path`?). ",
        ),
        (lambda config: config.update(schedulng_unit=1), "`schedulng_unit` (did you mean `scheduling_unit`?). "),
    ],
    ids=["top-level", "nested, misspelt", "top-level, misspelt"],
)
def test_a_config_with_an_unknown_key_is_a_usage_error_naming_it(det, context, change, key_path):
    raw = context.config()
    change(raw)
    config = context.write_config(raw=raw, filename="bad.yaml")
    result = det.here("experiment", "create", config, context.directory)
    assert_usage_error(result, f"{config}: experiment config: unknown key {key_path}", "Expected one of:")
    assert not det.store.exists()  # nor is a store made for it


@pytest.mark.parametrize(
    "option, message",
    [
        (("--slots", "0"), "argument --slots: must be a positive integer, not '0'"),
        (("--slots", "two"), "argument --slots: must be a positive integer, not 'two'"),
        (("--seed", "-1"), "argument --seed: must be an integer from 0 to 2**31 - 1, not '-1'"),
        (("--seed", str(2**31)), f"argument --seed: must be an integer from 0 to 2**31 - 1, not '{2**31}'"),
    ],
)
def test_bad_options_are_argparse_errors(det, context, option, message):
    result = det.here("experiment", "create", context.write_config(), context.directory, *option)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: det-estimator experiment create")
    assert f"det-estimator experiment create: error: {message}" in result.stderr
    assert not det.store.exists() or det.json("experiment", "list") == []


def test_cluster_keys_are_named_in_a_warning_of_the_commands_own_not_pythons(det, context, tmp_path):
    # The entrypoint is missing, so the command stops once the config is read: no run needed.
    config = context.write_config(entrypoint="absent:AnalyticTrial", bind_mounts=[])
    result = det("experiment", "create", config, context.directory)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        "det-estimator: warning: experiment config: ignored 1 key(s) that matter only on a cluster: `bind_mounts`"
    ), result.stderr
    job = tmp_path / "job.yaml"
    job.write_text("entrypoint_script: python3 absent.py\ndata: {}\nenvironment:\n  image: ignored:latest\n")
    result = det("job", "run", job, context.directory)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        "det-estimator: warning: job config: ignored 1 key(s) that matter only on a cluster: `environment.image`"
    ), result.stderr
    assert "ClusterKeysIgnoredWarning" not in result.stderr and "load_job_config" not in result.stderr


def test_an_entrypoint_module_outside_the_context_dir_is_a_usage_error(det, context):
    config = context.write_config(entrypoint="elsewhere.trial:AnalyticTrial")
    result = det.here("experiment", "create", config, context.directory)
    assert_usage_error(
        result,
        f"The config's entrypoint module 'elsewhere.trial' is not in CONTEXT_DIR {context.directory.resolve()}",
        "expected elsewhere/trial.py there.",
    )
    assert not det.store.exists()  # nor is a store made for it


@pytest.mark.parametrize(
    "command",
    [
        ("experiment", "describe", "99"),
        ("experiment", "pause", "99"),
        ("experiment", "resume", "99"),
        ("experiment", "plot", "99", "-o", "curves.png"),
        ("checkpoint", "list", "99"),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_an_unknown_experiment_id_is_a_usage_error(completed, tmp_path, command):
    det = completed[0]
    command = [str(tmp_path / part) if part == "curves.png" else part for part in command]
    result = det.here(*command)
    assert_usage_error(result, f"There is no experiment 99 in the store {det.store}.")
    assert not (tmp_path / "curves.png").exists()


def test_an_unknown_trial_id_is_a_usage_error(completed):
    det = completed[0]
    assert_usage_error(det.here("trial", "logs", "99"), f"There is no trial 99 in the store {det.store}.")


def test_a_completed_experiment_can_be_neither_paused_nor_resumed(completed):
    det, _, experiment_id, _ = completed
    assert_usage_error(
        det.here("experiment", "pause", experiment_id),
        f"Experiment {experiment_id} is COMPLETED: only an ACTIVE one can be paused.",
    )
    assert_usage_error(
        det.here("experiment", "resume", experiment_id),
        f"Experiment {experiment_id} is COMPLETED: it has completed; nothing to resume.",
    )
    assert det.experiment(experiment_id)["state"] == "COMPLETED"


def test_plot_to_a_file_of_no_image_format_is_a_usage_error(completed, tmp_path):
    det, _, experiment_id, _ = completed
    output = tmp_path / "curves.txt"
    result = det.here("experiment", "plot", experiment_id, "-o", output)
    assert_usage_error(result, f"-o {output}: name a .png, .svg or .pdf file.")
    assert not output.exists()


def test_an_entrypoint_class_that_does_not_exist_is_refused_before_anything_is_recorded(det, context):
    config = context.write_config(entrypoint="analytic_trial:NoSuchTrial")
    result = det("experiment", "create", config, context.directory)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "names 'NoSuchTrial', which" in result.stderr and "It defines: AnalyticTrial" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not det.store.exists()  # nor is a store made for it


# 4. Two experiments at once on one store.


def test_two_experiments_created_at_once_both_complete_with_their_own_metrics(det, tmp_path, make_context, analytic):
    rates = {"first": 0.01, "second": 0.02}
    contexts = {name: make_context(tmp_path / name) for name in rates}
    running = {
        name: det.start(
            "experiment",
            "create",
            contexts[name].write_config(20, name=name, hparams={"learning_rate": rate}),
            contexts[name].directory,
        )
        for name, rate in rates.items()
    }
    ids = {}
    for name, command in running.items():
        result = command.finish()
        assert result.returncode == 0, result.stdout + result.stderr
        ids[name] = created_id(result.stdout)
        assert f"Experiment {ids[name]} COMPLETED after 20 batches." in result.stdout
    assert sorted(ids.values()) == [1, 2]

    experiments = {e["name"]: e for e in det.json("experiment", "list")}
    assert set(experiments) == set(rates)
    for name, rate in rates.items():
        assert experiments[name]["id"] == ids[name]
        assert experiments[name]["state"] == "COMPLETED" and experiments[name]["batches_trained"] == 20
        (trial,) = det.json("experiment", "describe", ids[name])["trials"]
        assert trial["hparams"]["learning_rate"] == rate
        assert [v["batches"] for v in trial["validations"]] == [5, 10, 15, 20]
        assert_weights_follow_the_closed_form(analytic, trial["validations"], learning_rate=rate)
        expected_losses = analytic.expected_workload_losses(20, 5, rate, GLOBAL_BATCH)
        assert [t["metrics"]["loss"] for t in trial["training"]] == pytest.approx(expected_losses, rel=1e-5)
        (checkpoint,) = det.json("checkpoint", "list", ids[name])
        assert checkpoint["batches"] == 20 and Path(checkpoint["path"]).is_dir()


# 5. Test mode.


def test_test_mode_trains_one_batch_and_writes_one_checkpoint(det, context):
    result = det.ok("experiment", "create", context.write_config(1000), context.directory, "--test")
    experiment_id = created_id(result.stdout)
    assert f"Experiment {experiment_id} COMPLETED after 1 batches." in result.stdout
    experiment = det.experiment(experiment_id)
    assert experiment["state"] == "COMPLETED" and experiment["test"] is True
    assert experiment["batches_trained"] == 1
    (checkpoint,) = det.json("checkpoint", "list", experiment_id, "--all")
    assert checkpoint["batches"] == 1 and checkpoint["state"] == "COMPLETED"
    assert Path(checkpoint["path"]).is_dir()
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    assert [v["batches"] for v in trial["validations"]] == [1]


def test_a_pause_reaches_an_experiment_launched_on_another_machine_through_the_store(det):
    with ExperimentStore(det.store) as store:
        experiment_id = store.create_experiment("elsewhere", {}, "/code", "model_def:Trial", 2, False)
        store.set_launcher(experiment_id, os.getpid())  # alive here: signalling it would be wrong
    with contextlib.closing(sqlite3.connect(det.store)) as raw, raw:
        raw.execute("UPDATE experiments SET launcher_host = 'host2' WHERE id = ?", (experiment_id,))
    # Nothing runs it here, so nothing pauses: the command waits, then says so; no process was signalled.
    result = det("experiment", "pause", str(experiment_id), "--timeout", "1")
    assert result.returncode == 1 and f"Experiment {experiment_id} has not stopped within 1 s." in result.stderr
    assert "is ACTIVE" not in result.stdout
    as_json = det("experiment", "pause", str(experiment_id), "--timeout", "1", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout) == {"id": experiment_id, "state": "ACTIVE"}
    with ExperimentStore(det.store) as store:
        assert store.experiment(experiment_id).pause_requested_at is not None  # what its launcher polls


def rows_of_every_table(store_path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(store_path)) as raw:
        tables = [name for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: raw.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in tables}


def test_a_launcher_whose_experiment_another_host_took_over_ends_its_trial_and_records_nothing_more(det, context):
    config = context.write_config(SLOW_BATCHES, hparams=SLOW)
    running = det.start("experiment", "create", config, context.directory)
    running.wait_for("checkpoint ")
    # What `experiment resume` on host2 writes once this launcher's heartbeat is older than the
    # lease (its host cut off from the database server for half a minute, say).
    with contextlib.closing(sqlite3.connect(det.store)) as raw, raw:
        raw.execute(
            "UPDATE experiments SET launcher_pid = 4242, launcher_host = 'host2', launcher_started = NULL,"
            " launcher_seen_at = (julianday('now') - 2440587.5) * 86400.0"
        )
    result = running.finish(timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Experiment 1 was taken over by process 4242 on host2" in result.stderr
    ended = rows_of_every_table(det.store)
    time.sleep(3)  # 15 batches at the trial's speed, with their metrics and a validation
    assert rows_of_every_table(det.store) == ended  # the trial's processes are gone
    (experiment,) = det.json("experiment", "list")
    assert experiment["state"] == "ACTIVE" and experiment["batches_trained"] < SLOW_BATCHES  # left to host2


@pytest.mark.parametrize(
    ("state", "error", "shown"),
    [
        (
            "ERROR",
            {"rank": 0, "type": "RuntimeError", "message": "injected failure"},
            "rank 0: RuntimeError: injected failure",
        ),
        (
            "ERROR",
            {"rank": 1, "type": None, "message": "the process exited with status 137 (killed by SIGKILL)"},
            "rank 1: the process exited with status 137 (killed by SIGKILL)",
        ),
        (
            "INTERRUPTED",
            {"rank": 0, "type": "BrokenPipeError", "message": "[Errno 32] Broken pipe", "consequence": True},
            "its launcher was gone (then rank 0: BrokenPipeError: [Errno 32] Broken pipe)",
        ),
    ],
)
def test_a_runs_error_is_one_line_with_its_rank_and_a_dead_launchers_consequence_said_so(state, error, shown):
    from det_estimator.cli._experiments import run_cause

    assert run_cause(State(state), error) == shown
