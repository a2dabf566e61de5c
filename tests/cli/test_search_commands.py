"""Hyperparameter searches end to end: the command runs, pauses, resumes and recovers them (a NumPy-free script)."""

import contextlib
import json
import random
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest
import yaml

SUPPORT = Path(__file__).parents[1] / "support"
BATCHES = 20

# The searches run a NumPy-free script on one slot a trial: the same on both stacks.
pytestmark = pytest.mark.any_stack


def loss(x: float, batches: int) -> float:
    return (x - 0.3) ** 2 + 1.0 / batches


@pytest.fixture
def search_dir(tmp_path) -> Path:
    directory = tmp_path / "search"
    directory.mkdir()
    shutil.copy(SUPPORT / "search_script.py", directory / "search_script.py")
    return directory


def write_config(directory: Path, searcher: dict, hparams: dict = None, filename: str = "search.yaml") -> Path:
    config = {
        "name": "search",
        "entrypoint": "python3 search_script.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}, **(hparams or {})},
        "searcher": {"metric": "loss", "max_length": {"batches": BATCHES}, **searcher},
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": "checkpoints",
            "save_trial_latest": 1,
            "save_trial_best": 0,
        },
        "reproducibility": {"experiment_seed": 11},
        "max_restarts": 0,  # a failing trial exits the search at once
    }
    path = directory / filename
    path.write_text(yaml.safe_dump(config))
    return path


def trials_of(det, experiment_id: int) -> dict[int, dict]:
    """The experiment's trials by their request id in the search."""
    described = det.json("experiment", "describe", experiment_id)
    return {trial["request_id"]: trial for trial in described["trials"]}


def final_validations(trials: dict[int, dict]) -> dict[int, tuple]:
    return {
        request: (trial["hparams"]["x"], [(v["batches"], v["metrics"]) for v in trial["validations"]][-1:])
        for request, trial in trials.items()
    }


def max_overlap(runs: list[tuple[float, float]]) -> int:
    """The most runs that were going on at one moment."""
    moments = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    current = best = 0
    for _, step in moments:
        current += step
        best = max(best, current)
    return best


def test_a_random_search_runs_its_trials_two_at_a_time_and_ranks_them(det, search_dir):
    config = write_config(
        search_dir, {"name": "random", "max_trials": 4, "max_concurrent_trials": 2}, {"seconds_per_batch": 0.05}
    )
    result = det.ok("experiment", "create", config, search_dir, "--slots", "2")
    assert result.stdout.startswith(f"Created experiment 1 (random search of 4 trials) in {det.store}\n")
    assert "Experiment 1 COMPLETED after 80 batches." in result.stdout
    assert result.stdout.count(f"done after {BATCHES} batches") == 4

    trials = trials_of(det, 1)
    assert sorted(trials) == [0, 1, 2, 3]
    xs = {request: trial["hparams"]["x"] for request, trial in trials.items()}
    assert len(set(xs.values())) == 4 and all(0.0 <= x <= 1.0 for x in xs.values())
    for trial in trials.values():
        assert trial["state"] == "COMPLETED" and trial["search_state"] == "CLOSED"
        assert trial["validations"][-1]["metrics"]["loss"] == pytest.approx(loss(trial["hparams"]["x"], BATCHES))
    # Ranked best first, and the best is the sampled x closest to 0.3.
    described = det.json("experiment", "describe", 1)
    ranked = [trial["hparams"]["x"] for trial in described["trials"]]
    assert ranked == sorted(xs.values(), key=lambda x: abs(x - 0.3))
    assert described["best_validation"]["value"] == pytest.approx(loss(ranked[0], BATCHES))
    # Two slots: two trials at a time, never more, as the store's times show.
    runs = [(run["started_at"], run["ended_at"]) for trial in trials.values() for run in trial["runs"]]
    assert max_overlap(runs) == 2
    listed = det.ok("trial", "list", 1).stdout.splitlines()
    assert listed[0].split()[:5] == ["TRIAL", "STATE", "SEARCH", "BATCHES", "BEST"]
    assert det.json("trial", "describe", described["trials"][0]["id"])["hparams"]["x"] == ranked[0]


def test_a_search_run_one_trial_at_a_time_says_which_trial_each_line_is_of(det, search_dir):
    # Its display starts when only the first trial is recorded: the search is what says
    # that several trials will run, not the trials recorded so far.
    config = write_config(search_dir, {"name": "random", "max_trials": 2, "max_concurrent_trials": 1})
    result = det.ok("experiment", "create", config, search_dir)
    ids = sorted(trial["id"] for trial in trials_of(det, 1).values())
    progress = result.stdout.split("\n", 1)[1].split("\n\nExperiment 1 COMPLETED", 1)[0].splitlines()
    assert progress and all(line.startswith(("trial 1: ", "trial 2: ")) for line in progress), result.stdout
    for trial_id in ids:
        assert f"trial {trial_id}: validation after {BATCHES} batches: loss " in result.stdout
        assert f"trial {trial_id}: done after {BATCHES} batches" in progress


def test_a_grid_search_visits_every_point(det, search_dir):
    hparams = {
        "x": {"type": "double", "minval": 0.1, "maxval": 0.5, "count": 3},
        "kind": {"type": "categorical", "vals": ["a", "b"]},
    }
    config = write_config(search_dir, {"name": "grid", "max_concurrent_trials": 2}, hparams)
    result = det.ok("experiment", "create", config, search_dir, "--slots", "2")
    assert result.stdout.startswith(f"Created experiment 1 (grid search of 6 trials) in {det.store}\n")
    seen = sorted((t["hparams"]["x"], t["hparams"]["kind"]) for t in trials_of(det, 1).values())
    assert seen == sorted((x, kind) for x in (0.1, 0.3, 0.5) for kind in ("a", "b"))


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "adaptive_asha", "max_trials": 8, "max_rungs": 3, "divisor": 2},
        {"name": "grid", "max_concurrent_trials": 2},
    ],
    ids=["adaptive_asha", "grid"],
)
def test_test_mode_of_a_search_runs_one_trial_of_one_batch(det, search_dir, searcher):
    # As the reference's test mode: the search becomes one trial, and a Core API script,
    # which trains to its operations' length, trains one batch.
    hparams = {"x": {"type": "double", "minval": 0.1, "maxval": 0.5, "count": 3}}
    config = write_config(search_dir, searcher, hparams)
    result = det.ok("experiment", "create", config, search_dir, "--test", "--slots", "2")
    assert "Experiment 1 COMPLETED after 1 batches." in result.stdout
    described = det.json("experiment", "describe", 1)
    assert described["test"] is True and described["config"]["searcher"]["name"] == "single"
    (trial,) = described["trials"]
    assert trial["batches_trained"] == 1 and [v["batches"] for v in trial["validations"]] == [1]
    assert 0.1 <= trial["hparams"]["x"] <= 0.5


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_adaptive_asha_stops_trials_early_and_keeps_the_best(det, search_dir, stop_once):
    searcher = {
        "name": "adaptive_asha",
        "max_trials": 8,
        "mode": "aggressive",
        "divisor": 4,
        "max_length": {"batches": 64},
        "stop_once": stop_once,
        "max_concurrent_trials": 2,
    }
    det.ok(
        "experiment", "create", write_config(search_dir, searcher, {"checkpoint_every": 8}), search_dir, "--slots", "2"
    )
    trials = trials_of(det, 1)
    assert len(trials) == 8
    lengths = sorted(trial["batches_trained"] for trial in trials.values())
    # Rungs at 16 and 64 batches: most trials stop at the first, at least one reaches the top.
    assert set(lengths) == {16, 64} and lengths.count(64) < 8
    at_top = [trial for trial in trials.values() if trial["batches_trained"] == 64]
    best = det.json("experiment", "describe", 1)["best_validation"]
    assert best["value"] == pytest.approx(min(loss(t["hparams"]["x"], 64) for t in at_top))
    # Every trial at the top went through the first rung: validated there, then promoted (in the same run,
    # or, for a promotion that came later, in a run resumed from its checkpoint at the rung).
    for trial in at_top:
        assert [v["batches"] for v in trial["validations"]] == [16, 64]
        for run in trial["runs"][1:]:
            assert run["state"] == "COMPLETED"


def test_a_trial_promoted_later_is_shown_resuming_from_its_rung_without_the_wait_in_its_speed(det, search_dir):
    # One trial at a time: the trials reach their rungs in one order, so the same trials
    # wait and are promoted later on every run (two trials at once race to their rungs,
    # and under load none may wait).
    searcher = {
        "name": "adaptive_asha",
        "max_trials": 6,
        "mode": "aggressive",
        "divisor": 2,
        "max_length": {"batches": 16},
        "stop_once": False,
        "max_concurrent_trials": 1,
    }
    hparams = {"checkpoint_every": 2, "seconds_per_batch": 0.02}
    result = det.ok("experiment", "create", write_config(search_dir, searcher, hparams), search_dir)
    lines = result.stdout.splitlines()
    later_runs = [
        (trial["id"], run["start_batches"])
        for trial in trials_of(det, 1).values()
        for run in trial["runs"]
        if run["start_batches"] > 0
    ]
    assert later_runs, "with this seed, some trial waits at a rung and is promoted later"
    for trial_id, start in later_runs:
        waited = lines.index(f"trial {trial_id}: waits for a promotion after {start} batches")
        resumed = lines.index(f"trial {trial_id}: resumed after {start} batches", waited)
        # Its speed is measured within the new run, not from the report before the wait:
        # none on its first report, one from its second on.
        reports = [line for line in lines[resumed:] if line.startswith(f"trial {trial_id}: [")]
        assert len(reports) >= 2, lines[resumed:]
        assert "batches/s" not in reports[0], reports[0]
        assert "batches/s" in reports[1], reports[1]


def test_failing_trials_do_not_stop_the_search_and_invalid_hyperparameters_are_replaced(det, search_dir):
    hparams = {"fail_above": 0.7, "invalid_below": 0.2}
    config = write_config(search_dir, {"name": "random", "max_trials": 6, "max_concurrent_trials": 2}, hparams)
    result = det("experiment", "create", config, search_dir, "--slots", "2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trials = list(trials_of(det, 1).values())
    failed = [t for t in trials if t["hparams"]["x"] > 0.7]
    invalid = [t for t in trials if t["hparams"]["x"] < 0.2]
    good = [t for t in trials if 0.2 <= t["hparams"]["x"] <= 0.7]
    assert failed and invalid, "the seed must draw some of each"
    assert all(t["search_state"] == "EXITED" and t["runs"][-1]["error"]["type"] == "ValueError" for t in failed)
    assert all(t["search_state"] == "EXITED" and t["runs"][-1]["error"]["type"] == "InvalidHP" for t in invalid)
    assert all(t["search_state"] == "CLOSED" for t in good)
    # Invalid hyperparameters are replaced: 6 trials count, the failed among them, the invalid ones not.
    assert len(good) + len(failed) == 6
    assert "exited early" in result.stdout


def test_a_search_where_every_trial_fails_ends_in_error_with_the_first_traceback(det, search_dir):
    config = write_config(
        search_dir, {"name": "random", "max_trials": 2, "max_concurrent_trials": 2}, {"fail_above": -1}
    )
    result = det("experiment", "create", config, search_dir, "--slots", "2")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr and "ValueError: x=" in result.stderr
    assert det.experiment(1)["state"] == "ERROR"
    resumed = det("experiment", "resume", 1)
    assert resumed.returncode == 2 and "every trial of its random search failed" in resumed.stderr


def test_a_failed_experiment_with_json_still_writes_its_summary_to_stdout(det, search_dir):
    config = write_config(search_dir, {"name": "single"}, {"fail_above": -1})
    result = det("experiment", "create", config, search_dir, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ValueError: x=" in result.stderr
    summary = json.loads(result.stdout)
    assert (summary["id"], summary["state"], summary["best_validation"]) == (1, "ERROR", None)


def test_a_script_that_fails_after_completing_its_training_is_shown_as_failed(det, search_dir):
    config = write_config(search_dir, {"name": "single"}, {"x": 0.3, "fail_when_done": True})
    result = det("experiment", "create", config, search_dir)
    assert result.returncode == 1, result.stdout + result.stderr  # not a silent success
    assert "RuntimeError: failed after reporting the training complete" in result.stderr
    assert "Experiment 1 failed (ERROR)" in result.stderr and "trial logs 1" in result.stderr
    (trial,) = det.json("experiment", "describe", 1)["trials"]
    assert trial["state"] == "ERROR"
    assert trial["validations"][-1]["metrics"]["loss"] == pytest.approx(loss(0.3, BATCHES))
    # The experiment failed with its only trial, which trained every batch before it failed.
    assert (trial["batches_trained"], trial["max_batches"]) == (BATCHES, BATCHES)
    (experiment,) = det.json("experiment", "list")
    assert experiment["state"] == "ERROR"
    (row,) = det.ok("experiment", "list").stdout.splitlines()[1:]
    assert f" {BATCHES}/{BATCHES} " in row and " ERROR " in row


def test_a_script_that_exits_without_completing_its_operation_is_shown_failed_saying_so(det, search_dir):
    config = write_config(search_dir, {"name": "single"}, {"x": 0.3, "skip_training": True})
    result = det("experiment", "create", config, search_dir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "Trial 1 failed:\nthe trial's processes exited with status 0 without completing its searcher operation "
        "(to 20 batches): no op.report_completed() on the chief, and no validation of searcher.metric 'loss'."
    ) in result.stderr


def test_a_searcher_metric_the_trial_does_not_report_is_an_error_naming_what_it_reports(det, search_dir):
    config = write_config(search_dir, {"name": "single"}, {"x": 0.3, "metric_name": "val_loss"})
    result = det("experiment", "create", config, search_dir)
    assert result.returncode == 2  # the config does not fit the code: bad input
    assert "searcher.metric 'loss' is not among the validation metrics: val_loss." in result.stderr


def test_a_search_whose_trials_all_fail_alike_shows_the_cause_once_and_each_log_on_its_own_line(det, search_dir):
    searcher = {"name": "random", "max_trials": 3, "max_concurrent_trials": 2}
    config = write_config(search_dir, searcher, {"metric_name": "val_loss"})
    result = det("experiment", "create", config, search_dir, "--slots", "2")
    assert result.returncode == 2
    assert result.stderr.count("searcher.metric 'loss' is not among the validation metrics: val_loss.") == 1
    assert "Trials 1, 2, 3 failed on rank 0:\n" in result.stderr
    lines = result.stderr.splitlines()
    assert "Experiment 1 failed (ERROR). The whole output of each trial:" in lines
    logs = [line for line in lines if "trial logs" in line]
    assert [line.split(":")[0] for line in logs] == ["  trial 1", "  trial 2", "  trial 3"]


def _interrupted_and_uninterrupted(det, make_det, search_dir, tmp_path, interrupt):
    searcher = {"name": "random", "max_trials": 4, "max_concurrent_trials": 2}
    config = write_config(search_dir, searcher, {"seconds_per_batch": 0.1, "checkpoint_every": 2})
    # The same search at full speed, uninterrupted: nothing has to land in it.
    at_full_speed = {"seconds_per_batch": 0.0, "checkpoint_every": 2}
    straight = make_det(tmp_path / "straight.sqlite")
    straight.ok(
        "experiment",
        "create",
        write_config(search_dir, searcher, at_full_speed, "straight.yaml"),
        search_dir,
        "--slots",
        "2",
    )

    running = det.start("experiment", "create", config, search_dir, "--slots", "2")
    running.wait_for("checkpoint ")
    interrupt(running)
    resumed = det("experiment", "resume", 1)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert det.experiment(1)["state"] == "COMPLETED"
    return final_validations(trials_of(straight, 1)), final_validations(trials_of(det, 1)), straight


def test_a_paused_search_resumes_to_the_same_trials_and_best(det, make_det, search_dir, tmp_path):
    def pause(running):
        det.ok("experiment", "pause", 1)
        finished = running.finish()
        assert finished.returncode == 0 and "Experiment 1 PAUSED" in finished.stdout

    expected, found, straight = _interrupted_and_uninterrupted(det, make_det, search_dir, tmp_path, pause)
    assert found == expected
    assert det.json("experiment", "describe", 1)["best_validation"]["value"] == pytest.approx(
        straight.json("experiment", "describe", 1)["best_validation"]["value"]
    )


def test_a_search_killed_with_everything_resumes_to_the_same_trials_and_best(det, make_det, search_dir, tmp_path):
    def kill_everything(running):
        time.sleep(random.Random(3).uniform(0.0, 1.0))
        launcher = psutil.Process(running.process.pid)
        for member in [*launcher.children(recursive=True), launcher]:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.send_signal(signal.SIGKILL)
        running.process.wait(timeout=30)
        assert det.experiment(1)["state"] == "INTERRUPTED"

    expected, found, _ = _interrupted_and_uninterrupted(det, make_det, search_dir, tmp_path, kill_everything)
    assert found == expected
    assert json.dumps(found, sort_keys=True)


@pytest.mark.parametrize("engine", ["tensorflow", "horovod"])
def test_a_script_under_the_reference_launcher_runs_under_ours_with_one_note(det, search_dir, engine):
    config_path = write_config(search_dir, {"name": "single"}, {"x": 0.3})
    config = yaml.safe_load(config_path.read_text())
    config["entrypoint"] = f"python3 -m determined.launch.{engine} -- python3 search_script.py"
    config_path.write_text(yaml.safe_dump(config))
    result = det.ok("experiment", "create", config_path, search_dir)
    note = f"runs `determined.launch.{engine}`, the reference system's launcher"
    assert (result.stdout + result.stderr).count(note) == 1
    assert "Experiment 1 COMPLETED" in result.stdout
    (trial,) = det.json("experiment", "describe", 1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["runs"][-1]["state"] == "COMPLETED"
    assert trial["validations"][-1]["metrics"]["loss"] == pytest.approx(loss(0.3, BATCHES))


def test_after_detach_a_copied_store_and_its_original_resume_independently_each_with_its_checkpoints_on_disk(
    det, make_det, search_dir, tmp_path
):
    """``cp store.sqlite copy.sqlite`` of a paused experiment: the copy is refused, then detached, then both resume."""
    # Slow enough (6 s in all) for the pause to come long before the end, on a busy machine too.
    config = write_config(search_dir, {"name": "single"}, {"x": 0.5, "seconds_per_batch": 0.3, "checkpoint_every": 2})
    running = det.start("experiment", "create", config, search_dir)
    running.wait_for("checkpoint ")
    det.ok("experiment", "pause", 1)
    finished = running.finish()
    assert finished.returncode == 0 and "Experiment 1 PAUSED" in finished.stdout, finished.stdout + finished.stderr
    copy = make_det(tmp_path / "copy.sqlite")
    shutil.copy(det.store, copy.store)
    storage = search_dir / "checkpoints"

    def files_of(folder: Path) -> dict[str, bytes]:
        return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}

    before = files_of(storage)
    refused = copy("experiment", "resume", 1)
    assert refused.returncode == 2 and f"The store {copy.store} is a copy of the store {det.store}" in refused.stderr
    assert files_of(storage) == before

    detached = copy.json("store", "detach")
    assert files_of(storage).items() >= before.items()  # the original's files as they were; the copy's beside them
    for store in (copy, det):
        resumed = store("experiment", "resume", 1)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    folders = set()
    for store in (det, copy):
        assert store.json("experiment", "describe", 1)["state"] == "COMPLETED"
        listed = store.json("checkpoint", "list", 1)
        assert listed and all(Path(checkpoint["path"]).is_dir() for checkpoint in listed)
        (trial,) = store.json("experiment", "describe", 1)["trials"]
        folder = Path(trial["checkpoint_dir"])
        folders.add(folder)
        # Each trial's folder holds just the checkpoints its own store lists (retention kept the latest).
        assert {path.name for path in folder.iterdir()} == {Path(c["path"]).name for c in listed}
        assert trial["validations"][-1]["batches"] == BATCHES
    assert len(folders) == 2 and detached["new_id"] != detached["old_id"]
