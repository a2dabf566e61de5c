"""The Keras trial controller on two real processes under horovodrun: closed form, pause, kill, metrics, wrappers."""

import json
from pathlib import Path

import numpy as np
import pytest

import det_estimator as det

SUPPORT = Path(__file__).parent.parent / "support"
LEARNING_RATE, GLOBAL_BATCH = 0.01, 8


@pytest.fixture(scope="session")
def analytic_keras(module_loader):
    module_loader(SUPPORT / "analytic_closed_form.py")
    return module_loader(SUPPORT / "analytic_keras_trial.py")


SLOW = pytest.mark.slow


# On one process every loader goes through a pause and a kill (tests/keras); on two, the
# default path keeps tf.data, whose iterator state is per rank, and the others are slow.
@pytest.mark.parametrize("loader", [pytest.param("numpy", marks=SLOW), pytest.param("sequence", marks=SLOW), "tfdata"])
def test_two_processes_follow_the_closed_form_through_a_pause_and_a_kill(analytic_keras, runs, tmp_path, loader):
    # A pause or a kill lands a few batches after a checkpoint: 2.5 s and more before the end
    # of 30 batches at these speeds.
    process = analytic_keras.start_run(tmp_path, 30, 2, 0.1, loader=loader)
    runs.wait_for_line(process, "checkpoint")
    process.terminate()  # the launcher: every rank checkpoints and stops
    status, output, paused = runs.finish(process)
    assert status == 0, output[-3000:]
    assert paused["state"] == "PAUSED" and paused["checkpoints"][-1]["batches"] == paused["batches_trained"]
    analytic_keras.assert_closed_form(paused["validations"])
    # Each rank's loss is over its half batch; their average is the global batch's loss.
    expected = analytic_keras.expected_workload_losses(paused["batches_trained"], 5, LEARNING_RATE, GLOBAL_BATCH)
    losses = [t["metrics"]["loss"] for t in paused["training"]]
    assert losses[: len(expected) - 1] == pytest.approx(expected[: len(losses)][:-1], rel=1e-5)

    process = analytic_keras.start_run(tmp_path, 30, 2, 0.25, loader=loader)
    runs.kill_at_random_batch(process, seed=5)  # every process at once, wherever it is
    final = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 30, loader), slots=2)
    resumed_after = final.batches_trained - len(final.validations) * 5
    assert paused["batches_trained"] < resumed_after < 30, "the kill must interrupt training after the first resume"
    assert final.batches_trained == 30
    analytic_keras.assert_closed_form(final.validations)


# Under pytest-xdist, the tests of one run on one test process, which runs it once.
ONE_UNWRAPPED_RUN = pytest.mark.xdist_group("keras_two_processes_unwrapped_optimizer")


@pytest.fixture(scope="session")
def unwrapped_optimizer_run(analytic_keras, tmp_path_factory):
    """Two processes train 10 batches with an optimizer the trial did not wrap, and validate on 9 records.

    The model's train step is Keras' guide's, which applies its own gradients.
    """
    directory = tmp_path_factory.mktemp("unwrapped-optimizer")
    config = analytic_keras.make_config(directory, 10)
    # Batches of 4: rank 0 evaluates 5 records, rank 1 four.
    config["hyperparameters"].update(wrap_optimizer=False, validation_records=9, custom_train_step=True)
    return directory, det.run_trial(analytic_keras.AnalyticKerasTrial, config, slots=2)


@ONE_UNWRAPPED_RUN
def test_validation_metrics_are_weighted_by_the_examples_each_process_evaluated(
    analytic_keras, unwrapped_optimizer_run
):
    tmp_path, outcome = unwrapped_optimizer_run
    assert [validation["batches"] for validation in outcome.validations] == [5, 10]
    for validation in outcome.validations:
        weight = validation["metrics"]["val_weight"]
        assert validation["metrics"]["val_loss"] == pytest.approx(analytic_keras.validation_loss(weight, 9), rel=1e-6)
        assert validation["metrics"]["val_records"] == 9
        errors = (weight * analytic_keras.FEATURES[:9].astype(float) - analytic_keras.TARGETS[:9].astype(float)) ** 2
        per_rank_average = (errors[[0, 1, 2, 3, 8]].mean() + errors[4:8].mean()) / 2
        assert abs(per_rank_average - errors.mean()) > 1e-3, "the data must tell weighted from unweighted"
    events = [analytic_keras.events(tmp_path / "events", rank) for rank in (0, 1)]
    # Every rank's callbacks see the combined metrics in on_test_end.
    assert [e["logs"] for e in events[0] if e["event"] == "test_end"] == [
        e["logs"] for e in events[1] if e["event"] == "test_end"
    ]


@ONE_UNWRAPPED_RUN
def test_an_optimizer_not_wrapped_is_wrapped_at_compile_and_averages_a_custom_train_step_s_gradients(
    analytic_keras, unwrapped_optimizer_run
):
    _, outcome = unwrapped_optimizer_run
    # Gradients averaged over both processes all the same, also those the model's own train
    # step applies: the closed form (validated on 9 records).
    assert outcome.validations
    for validation in outcome.validations:
        expected = analytic_keras.expected_weight(validation["batches"], LEARNING_RATE, GLOBAL_BATCH)
        assert validation["metrics"]["val_weight"] == pytest.approx(expected, rel=1e-5)
        assert validation["metrics"]["val_loss"] == pytest.approx(analytic_keras.validation_loss(expected, 9), rel=1e-5)


# Slow: in the default path, the run above trains this custom train step in the trial on two
# processes, and the pool's test below trains it with every kind of optimizer on two ranks.
@SLOW
@pytest.mark.parametrize(
    "optimizer",
    [{}, {"legacy_optimizer": True}, {"loss_scaled": True}, {"loss_scaled": True, "legacy_optimizer": True}],
)
def test_a_custom_train_step_that_applies_its_own_gradients_averages_them(analytic_keras, tmp_path, optimizer):
    # Keras' guide's train step calls apply_gradients; Horovod averages in compute_gradients.
    # A loss scale of a power of two keeps the closed form exact in float32.
    config = analytic_keras.make_config(tmp_path, 10)
    config["hyperparameters"].update(custom_train_step=True, **optimizer)
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, config, slots=2)
    analytic_keras.assert_closed_form(outcome.validations)


@pytest.mark.xdist_group("two_rank_pool")
def test_a_custom_train_step_averages_the_gradients_of_every_kind_of_optimizer(analytic_keras, horovod_job, tmp_path):
    # The optimizers wrapped as the trial's context wraps them, trained by the custom train
    # step of the test above on the two ranks of the pool.
    job = horovod_job("keras_custom_train_step.py", ["--output-dir", str(tmp_path), "--batches", "10"])
    assert job.returncode == 0, job.stdout[-5000:]
    expected = analytic_keras.expected_weight(10, LEARNING_RATE, GLOBAL_BATCH)
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert sorted(reports[0]) == ["legacy_optimizer", "loss_scaled", "loss_scaled_legacy_optimizer", "optimizer"]
    for kind, weight in reports[0].items():
        assert reports[1][kind] == weight, kind
        assert weight == pytest.approx(expected, rel=1e-5), kind
    # Rank 0's half of every batch alone would lead elsewhere: the weights above are averaged.
    weight, features, targets = 0.0, analytic_keras.FEATURES.astype(float), analytic_keras.TARGETS.astype(float)
    for step in range(10):
        rows = slice((step % 8) * GLOBAL_BATCH, (step % 8 + 1) * GLOBAL_BATCH, 2)
        weight -= LEARNING_RATE * np.mean(2.0 * (weight * features[rows] - targets[rows]) * features[rows])
    assert abs(weight - expected) > 1e-3


# Three runs on two processes: a long run. Each process's own masks across a resume, on two
# processes, run every time through det.keras.init() (tests/keras_api/test_fit_and_job_on_processes.py),
# on the one engine whose random states this trial's checkpoints hold too.
@pytest.mark.slow
def test_a_resumed_run_draws_each_process_s_own_dropout_masks(analytic_keras, tmp_path):
    # Per-process batches of 5 of 64 records: each epoch's last batch holds 4, and the 13
    # batches of an epoch give it to the processes in turn, so their generators part.
    def config(directory, batches):
        raw = analytic_keras.make_config(tmp_path / directory, batches, reproducibility={"experiment_seed": 5})
        raw["hyperparameters"].update(dropout=0.5, global_batch_size=10)
        return raw

    uninterrupted = det.run_trial(analytic_keras.AnalyticKerasTrial, config("straight", 15), slots=2)
    det.run_trial(analytic_keras.AnalyticKerasTrial, config("resumed", 10), slots=2)
    resumed = det.run_trial(analytic_keras.AnalyticKerasTrial, config("resumed", 15), slots=2)
    assert resumed.training[-1]["metrics"]["loss"] == uninterrupted.training[-1]["metrics"]["loss"]
    assert resumed.validations[-1]["metrics"]["val_weight"] == uninterrupted.validations[-1]["metrics"]["val_weight"]
