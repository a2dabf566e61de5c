"""The trial controller on two real processes under horovodrun."""

import json
import time

import numpy as np
import pytest

import det_estimator as det

LEARNING_RATE, GLOBAL_BATCH = 0.01, 8


def rank_events(tmp_path, rank):
    path = tmp_path / "events" / f"rank{rank}.jsonl"
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def final_weight(outcome):
    return outcome.validations[-1]["metrics"]["weight"]


# Under pytest-xdist, the tests of one run on one test process, which runs it once.
ONE_RESUMED_RUN = pytest.mark.xdist_group("estimator_two_processes_resumed")


@pytest.fixture(scope="session")
def resumed(analytic, tmp_path_factory):
    """Two processes train 10 batches, then resume to 20; each validates 9 records: 5 on rank 0, 4 on rank 1."""
    directory = tmp_path_factory.mktemp("resumed")

    def run(batches):
        config = analytic.make_config(directory, batches)
        config["hyperparameters"]["validation_records"] = 9
        return det.run_trial(analytic.AnalyticTrial, config, slots=2)

    return directory, run(10), run(20)


@ONE_RESUMED_RUN
def test_two_processes_follow_the_closed_form_across_a_resume(analytic, resumed):
    tmp_path, first, second = resumed

    assert first.batches_trained == 10 and second.batches_trained == 20
    # Each rank's loss is over its half batch; their average is the global batch's loss.
    expected_losses = analytic.expected_workload_losses(20, 5, LEARNING_RATE, GLOBAL_BATCH)
    losses = [t["metrics"]["loss"] for t in first.training + second.training]
    assert losses == pytest.approx(expected_losses, rel=1e-5)
    # A scalar summary is averaged over the ranks' half batches: the global batch's value.
    means = [t["metrics"]["mean_x"] for t in first.training + second.training]
    assert means == pytest.approx(analytic.expected_last_batch_means(20, 5, GLOBAL_BATCH), rel=1e-6)
    for validation in first.validations + second.validations:
        expected = analytic.expected_weight(validation["batches"], LEARNING_RATE, GLOBAL_BATCH)
        assert validation["metrics"]["weight"] == pytest.approx(expected, rel=1e-5)
        assert validation["metrics"]["records"] == 9  # both shards, reduced
    # The chief alone writes checkpoints; every rank loads them and closes.
    assert rank_events(tmp_path, 0) == ["on_checkpoint_end"] * 2 + ["on_trial_close"] + ["on_checkpoint_load"] + [
        "on_checkpoint_end"
    ] * 2 + ["on_trial_close"]
    assert rank_events(tmp_path, 1) == ["on_trial_close", "on_checkpoint_load", "on_trial_close"]
    # Worker processes run EstimatorTrial code with TensorFlow's V2 behaviour disabled, as the reference.
    assert analytic.tf_behaviour(tmp_path / "events") == {
        "0": {"resource_variables": False},
        "1": {"resource_variables": False},
    }


# Under pytest-xdist, the tests of one run on one test process, which runs it once.
ONE_STOPPED_RUN = pytest.mark.xdist_group("estimator_two_processes_stopped")


@pytest.fixture(scope="session")
def stopped(analytic, tmp_path_factory):
    """Two processes asked for 20 batches, rank 1 alone asking to stop at batch 7; training metrics not averaged."""
    directory = tmp_path_factory.mktemp("stopped")
    config = analytic.make_config(directory, 20, optimizations={"average_training_metrics": False})
    config["hyperparameters"]["stop"] = {"rank": 1, "batch": 7}
    return directory, det.run_trial(analytic.AnalyticTrial, config, slots=2)


@ONE_STOPPED_RUN
@pytest.mark.timeout(120)  # the run, if this test sets it up: a rank left in a collective hangs it
def test_without_average_training_metrics_the_chief_reports_its_own_loss(analytic, stopped):
    _, outcome = stopped
    # The chief holds records 0, 2, 4, ... of each global batch: the loss of its half only.
    weight, losses = 0.0, []
    for step in range(8):
        start = (step % (analytic.NUM_RECORDS // GLOBAL_BATCH)) * GLOBAL_BATCH
        x = analytic.FEATURES[start : start + GLOBAL_BATCH].astype(float)
        y = analytic.TARGETS[start : start + GLOBAL_BATCH].astype(float)
        losses.append(np.mean((weight * x[0::2] - y[0::2]) ** 2))
        weight -= LEARNING_RATE * np.mean(2.0 * (weight * x - y) * x)
    assert [training["batches"] for training in outcome.training] == [5, 8]
    reported = [training["metrics"]["loss"] for training in outcome.training]
    assert reported == pytest.approx([np.mean(losses[:5]), np.mean(losses[5:])], rel=1e-5)
    averaged = analytic.expected_workload_losses(5, 5, LEARNING_RATE, GLOBAL_BATCH)[0]
    assert abs(reported[0] - averaged) > 1e-3, "the data must tell the chief's loss from the mean"


# On one process (tests/estimator) an EstimatorTrial killed at a random batch resumes to the
# closed form; on two, the Keras trial's test kills a whole job; above, two processes resume.
@pytest.mark.slow
def test_a_job_killed_at_a_random_batch_resumes_to_the_uninterrupted_result(analytic, runs, tmp_path):
    process = runs.start(tmp_path, 60, slots=2, seconds_per_batch=0.1)
    runs.kill_at_random_batch(process, seed=5)
    outcome = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 60), slots=2)
    resumed_after = outcome.batches_trained - len(outcome.validations) * 5
    assert outcome.validations and resumed_after < 60, "the kill must interrupt training"
    assert outcome.batches_trained == 60
    assert final_weight(outcome) == pytest.approx(analytic.expected_weight(60, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)


def test_sigterm_to_the_launcher_pauses_every_rank(analytic, runs, tmp_path):
    process = runs.start(tmp_path, 400, slots=2, seconds_per_batch=0.05)
    runs.wait_for_line(process, "checkpoint")
    process.terminate()
    status, output, outcome = runs.finish(process)
    assert status == 0, output[-3000:]
    assert outcome["state"] == "PAUSED" and outcome["checkpoints"][-1]["batches"] == outcome["batches_trained"]
    assert all(events[-1] == "on_trial_close" for events in (rank_events(tmp_path, 0), rank_events(tmp_path, 1)))
    # The workload the pause ended has its scalar summaries, as full workloads do.
    assert outcome["training"][-1]["batches"] == outcome["batches_trained"]
    assert "mean_x" in outcome["training"][-1]["metrics"]


@ONE_STOPPED_RUN
@pytest.mark.timeout(120)
def test_a_stop_one_rank_s_hook_asks_for_ends_every_rank_after_the_same_next_batch(analytic, stopped):
    # Rank 1 alone asks to stop at batch 7: stopping there, it would leave rank 0 waiting in
    # batch 8's allreduce. Both stop after batch 8, validate and checkpoint there together.
    tmp_path, outcome = stopped

    assert outcome.batches_trained == 8
    assert [validation["batches"] for validation in outcome.validations] == [5, 8]
    assert final_weight(outcome) == pytest.approx(analytic.expected_weight(8, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)
    assert rank_events(tmp_path, 0) == ["on_checkpoint_end"] * 2 + ["on_trial_close"]


def test_one_failing_rank_ends_the_whole_job_quickly_with_its_traceback(runs, tmp_path):
    started = time.monotonic()
    status, output, outcome = runs.finish(runs.start(tmp_path, 40, slots=2, fail_on_rank=1), timeout=120)
    assert status != 0 and outcome is None
    assert "RuntimeError: rank 1 cannot build its input" in output
    assert "The trial failed: a worker exited with status" in output
    assert time.monotonic() - started < 90


def test_killing_the_launcher_leaves_no_worker_running(runs, tmp_path):
    import psutil

    process = runs.start(tmp_path, 100_000, slots=2, seconds_per_batch=0.05)  # hours, unless killed
    runs.wait_for_line(process, "checkpoint")
    job = psutil.Process(process.pid).children(recursive=True)
    assert any("det_estimator.worker" in " ".join(p.cmdline()) for p in job)
    process.kill()  # the launcher alone
    process.wait(timeout=30)
    gone, alive = psutil.wait_procs(job, timeout=30)
    assert not alive, f"still running: {[p.cmdline() for p in alive]}"


@ONE_RESUMED_RUN
def test_validation_metrics_are_weighted_by_the_examples_each_rank_evaluated(analytic, resumed):
    _, first, second = resumed  # rank 0 evaluates 5 records, rank 1 evaluates 4

    targets = analytic.TARGETS[:9].astype(float)
    for validation in first.validations + second.validations:
        assert validation["metrics"]["mean_target"] == pytest.approx(targets.mean(), rel=1e-6)
    per_rank_average = (targets[0::2].mean() + targets[1::2].mean()) / 2
    assert abs(per_rank_average - targets.mean()) > 1e-4, "the data must tell weighted from unweighted"


# On one process, tests/estimator/test_trial_controller.py resumes random draws exactly.
@pytest.mark.slow
def test_two_processes_resume_with_the_random_draws_of_an_uninterrupted_run(analytic, tmp_path):
    def config(directory, batches):
        raw = analytic.make_config(tmp_path / directory, batches, reproducibility={"experiment_seed": 5})
        raw["hyperparameters"]["noise"] = True  # dropout and other random draws in the training graph
        return raw

    uninterrupted = det.run_trial(analytic.AnalyticTrial, config("straight", 15), slots=2)
    det.run_trial(analytic.AnalyticTrial, config("resumed", 5), slots=2)
    resumed = det.run_trial(analytic.AnalyticTrial, config("resumed", 15), slots=2)
    assert [v["metrics"] for v in resumed.validations[-2:]] == [v["metrics"] for v in uninterrupted.validations[-2:]]
    losses = [t["metrics"]["loss"] for t in uninterrupted.training]
    assert [t["metrics"]["loss"] for t in resumed.training] == losses[1:]
    assert final_weight(uninterrupted) != pytest.approx(analytic.expected_weight(15, LEARNING_RATE, GLOBAL_BATCH))
