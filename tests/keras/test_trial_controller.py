"""The Keras trial controller on one process: the analytic trial for each loader, resumes, pauses, kills, exports."""

import re

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator._root_cause import RootCause, error_record, note, root_cause
from det_estimator.checkpoint import read_checkpoint

LEARNING_RATE, GLOBAL_BATCH = 0.01, 8
LOADERS = ["numpy", "sequence", "tfdata"]


def final_weight(outcome):
    return outcome.validations[-1]["metrics"]["val_weight"]


@pytest.mark.parametrize("loader", LOADERS)
def test_each_loader_follows_the_closed_form_and_checkpoints_everything(analytic_keras, tmp_path, loader):
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 20, loader))

    assert (outcome.state, outcome.batches_trained) == ("COMPLETED", 20)
    assert [t["batches"] for t in outcome.training] == [5, 10, 15, 20]
    expected_losses = analytic_keras.expected_workload_losses(20, 5, LEARNING_RATE, GLOBAL_BATCH)
    assert [t["metrics"]["loss"] for t in outcome.training] == pytest.approx(expected_losses, rel=1e-5)
    assert [t["metrics"]["records"] for t in outcome.training] == [40.0] * 4  # exact, over the workload
    assert [v["batches"] for v in outcome.validations] == [5, 10, 15, 20]
    analytic_keras.assert_closed_form(outcome.validations)

    (kept,) = outcome.checkpoints  # save_trial_latest=1 and save_trial_best=1: the last one is both
    checkpoint = read_checkpoint(kept["path"])
    metadata = checkpoint.metadata
    assert metadata["batches_trained"] == 20 and metadata["data_position"] == 20 and metadata["slots"] == 1
    assert metadata["validation_metrics"]["val_weight"] == final_weight(outcome)
    files = set(metadata["files"])
    assert {"model_checkpoint.index", "saved_model/saved_model.pb", "callbacks.json", "callbacks.npz"} <= files
    assert "events_note.txt" in files  # written by the callback's on_checkpoint_end
    assert ("data/rank0.index" in files) == (loader == "tfdata")  # a tf.data iterator's position
    events = analytic_keras.events(tmp_path / "events")
    assert [e["batches"] for e in events if e["event"] == "workload_begin"] == [0, 5, 10, 15]
    assert [e["epoch"] for e in events if e["event"] == "epoch_end"] == [0, 1]  # 8 batches per epoch
    assert all(e["logs"] == {} for e in events if e["event"] == "epoch_end")
    test_ends = [e["logs"] for e in events if e["event"] == "test_end"]
    assert [logs["weight"] for logs in test_ends] == [v["metrics"]["val_weight"] for v in outcome.validations]


@pytest.mark.parametrize("loader", LOADERS)
def test_a_resumed_trial_continues_at_the_batch_where_it_stopped(analytic_keras, tmp_path, loader):
    first = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 10, loader))
    second = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 23, loader))

    assert first.batches_trained == 10 and second.batches_trained == 23
    assert [v["batches"] for v in second.validations] == [15, 20, 23]
    analytic_keras.assert_closed_form(first.validations + second.validations)
    losses = [t["metrics"]["loss"] for t in first.training + second.training]
    assert losses == pytest.approx(
        analytic_keras.expected_workload_losses(23, 5, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5
    )
    # The callback's state came back from the checkpoint written after 10 batches (its 2nd), arrays included.
    (loaded,) = [e for e in analytic_keras.events(tmp_path / "events") if e["event"] == "load_state"]
    assert loaded == {"event": "load_state", "checkpoints": 2, "array": [0.0, 2.0, 4.0]}


def test_a_trial_resumed_at_its_operations_length_completes_it_and_trains_the_next(
    analytic_keras, tmp_path, searcher_operations
):
    # As a search trial killed after its checkpoint at a rung's length, before reporting it,
    # then promoted at once when it reports on resume.
    first = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 10))
    completed = searcher_operations([10, 20])
    second = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 20))

    assert (second.state, second.batches_trained) == ("COMPLETED", 20)
    assert [v["batches"] for v in second.validations] == [15, 20]
    analytic_keras.assert_closed_form(first.validations + second.validations)
    best_of_first = min(v["metrics"]["val_loss"] for v in first.validations)
    assert completed == [(10, best_of_first), (20, second.validations[-1]["metrics"]["val_loss"])]


@pytest.mark.parametrize("loader", LOADERS)
def test_a_shuffled_run_resumed_mid_epoch_sees_the_batches_of_an_uninterrupted_one(analytic_keras, tmp_path, loader):
    def config(directory, batches):
        raw = analytic_keras.make_config(tmp_path / directory, batches, loader, reproducibility={"experiment_seed": 3})
        raw["hyperparameters"]["shuffle"] = True
        return raw

    uninterrupted = det.run_trial(analytic_keras.AnalyticKerasTrial, config("straight", 20))
    det.run_trial(analytic_keras.AnalyticKerasTrial, config("resumed", 11))
    resumed = det.run_trial(analytic_keras.AnalyticKerasTrial, config("resumed", 20))
    assert final_weight(resumed) == final_weight(uninterrupted)
    # Shuffled data trains differently from the data in order: the shuffle really happened.
    in_order = analytic_keras.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH)
    assert final_weight(uninterrupted) != pytest.approx(in_order, rel=1e-6)


# A pause or a kill lands a few batches after a checkpoint: 2.5 s and more before the end of
# 30 batches at the speeds below. Slow: in the default path, tests/distributed pauses and
# kills a tf.data trial on two processes, a pause in this process stops at its batch (below),
# and every loader resumes where it stopped (above).
@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_a_pause_and_a_kill_at_a_random_batch_both_resume_to_the_closed_form(analytic_keras, runs, tmp_path, loader):
    process = analytic_keras.start_run(tmp_path, 30, 1, 0.1, loader=loader)
    runs.wait_for_line(process, "checkpoint")
    process.terminate()
    status, output, outcome = runs.finish(process)
    assert status == 0, output[-3000:]
    assert outcome["state"] == "PAUSED" and 5 <= outcome["batches_trained"] < 30
    paused_at = outcome["batches_trained"]
    assert outcome["checkpoints"][-1]["batches"] == paused_at
    analytic_keras.assert_closed_form(outcome["validations"])

    process = analytic_keras.start_run(tmp_path, 30, 1, 0.25, loader=loader)
    runs.kill_at_random_batch(process, seed=11)
    config = analytic_keras.make_config(tmp_path, 30, loader)
    final = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    resumed_after = final.batches_trained - len(final.validations) * 5
    assert paused_at < resumed_after < 30, "the kill must interrupt training after the resume from the pause"
    assert final.batches_trained == 30
    analytic_keras.assert_closed_form(final.validations)


def test_a_pause_in_the_callers_process_returns_paused_with_a_checkpoint(analytic_keras, tmp_path):
    config = analytic_keras.make_config(tmp_path, 40)
    config["hyperparameters"]["pause_at_batch"] = 7  # the callback sends SIGTERM to this process
    paused = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    assert (paused.state, paused.batches_trained) == ("PAUSED", 7)
    assert paused.checkpoints[-1]["batches"] == 7
    assert [v["batches"] for v in paused.validations] == [5]  # a pause checkpoints without validating


@pytest.mark.parametrize("work", ["validation", "checkpoint"])
def test_a_pause_asked_for_during_a_validation_or_checkpoint_stops_at_that_batch(analytic_keras, tmp_path, work):
    config = analytic_keras.make_config(tmp_path, 40)
    config["hyperparameters"]["pause_during"] = {"work": work, "batch": 10}  # SIGTERM as that work at 10 ends
    paused = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    assert (paused.state, paused.batches_trained) == ("PAUSED", 10)
    assert [c["batches"] for c in paused.checkpoints] == [10]  # one checkpoint, with the validation's metrics
    assert [v["batches"] for v in paused.validations] == [5, 10]


def test_test_mode_runs_one_batch_one_validation_step_and_one_checkpoint(analytic_keras, tmp_path):
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 1000), test=True)
    assert outcome.batches_trained == 1
    assert [v["batches"] for v in outcome.validations] == [1]
    assert outcome.validations[0]["metrics"]["val_records"] == GLOBAL_BATCH  # one validation batch
    assert len(outcome.checkpoints) == 1


def test_the_loaded_model_and_the_saved_model_predict_what_the_trained_model_predicts(analytic_keras, tmp_path):
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 10))
    path = outcome.checkpoints[-1]["path"]
    expected = final_weight(outcome) * analytic_keras.SERVING_INPUT
    # As the reference documents it: a Keras model, called on samples.
    model = det.keras.load_model_from_checkpoint_path(path)
    assert isinstance(model, tf.keras.Model)
    np.testing.assert_allclose(model(analytic_keras.SERVING_INPUT).numpy(), expected, rtol=1e-6)
    served = tf.saved_model.load(f"{path}/saved_model")
    (predictions,) = served.signatures["serving_default"](x=tf.constant(analytic_keras.SERVING_INPUT)).values()
    np.testing.assert_allclose(predictions.numpy(), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="There is no Keras checkpoint"):
        det.keras.load_model_from_checkpoint_path(tmp_path / "events")


def test_a_resumed_run_draws_the_dropout_masks_an_uninterrupted_one_would(analytic_keras, tmp_path):
    def config(directory, batches):
        raw = analytic_keras.make_config(tmp_path / directory, batches, reproducibility={"experiment_seed": 5})
        raw["hyperparameters"]["dropout"] = 0.5
        return raw

    uninterrupted = det.run_trial(analytic_keras.AnalyticKerasTrial, config("straight", 15))
    det.run_trial(analytic_keras.AnalyticKerasTrial, config("resumed", 10))
    resumed = det.run_trial(analytic_keras.AnalyticKerasTrial, config("resumed", 15))
    assert resumed.training[-1]["metrics"]["loss"] == uninterrupted.training[-1]["metrics"]["loss"]
    assert final_weight(resumed) == final_weight(uninterrupted)
    # The dropout really changed training, so equal weights mean equal masks.
    assert final_weight(uninterrupted) != pytest.approx(analytic_keras.expected_weight(15, LEARNING_RATE, GLOBAL_BATCH))


def test_the_same_seed_gives_the_same_metrics_and_another_seed_others(analytic_keras, tmp_path):
    def run(directory, seed):
        config = analytic_keras.make_config(tmp_path / directory, 10, reproducibility={"experiment_seed": seed})
        config["hyperparameters"].update(shuffle=True, dropout=0.25)
        return [v["metrics"] for v in det.run_trial(analytic_keras.AnalyticKerasTrial, config).validations]

    first, again, other_seed = run("a", 7), run("b", 7), run("c", 8)
    assert first == again
    assert first != other_seed


def test_validation_metrics_and_checkpoints_follow_the_config_periods(analytic_keras, tmp_path):
    config = analytic_keras.make_config(
        tmp_path,
        12,
        min_validation_period={"batches": 10},
        min_checkpoint_period={"batches": 5},
        checkpoint_policy="none",
        perform_initial_validation=True,
    )
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    assert [v["batches"] for v in outcome.validations] == [0, 10, 12]
    checkpoints = [e["batches"] for e in analytic_keras.events(tmp_path / "events") if e["event"] == "checkpoint_end"]
    assert checkpoints == [5, 10, 12]


class NoBatches(tf.keras.utils.Sequence):
    """A Sequence of no batch (a batch size larger than the data, say)."""

    def __len__(self):
        return 0

    def __getitem__(self, index):
        raise IndexError(index)


@pytest.mark.parametrize("loader", ["numpy", "sequence", "dataset"])
def test_a_model_compiled_with_several_steps_per_execution_trains_and_validates(analytic_keras, tmp_path, loader):
    config = analytic_keras.make_config(tmp_path, 12, loader=loader)
    config["hyperparameters"]["steps_per_execution"] = 4
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    assert [v["batches"] for v in outcome.validations] == [5, 10, 12]
    analytic_keras.assert_closed_form(outcome.validations)


@pytest.mark.parametrize(
    ("method", "returned", "error", "message"),
    [
        ("build_model", lambda self: "not a model", TypeError, "build_model() must return a tf.keras.Model"),
        (
            "build_model",
            lambda self: tf.keras.Sequential([tf.keras.layers.Dense(1)]),
            det.DetEstimatorError,
            "never went through context.wrap_model()",
        ),
        (
            "build_model",
            lambda self: self.context.wrap_model(tf.keras.Sequential([tf.keras.layers.Dense(1)])),
            det.DetEstimatorError,
            "is not compiled",
        ),
        ("build_training_data_loader", lambda self: [1, 2], TypeError, "a list: return a tuple"),
        ("build_training_data_loader", lambda self: NoBatches(), ValueError, "The Sequence NoBatches is empty"),
        ("build_validation_data_loader", lambda self: iter([]), TypeError, "Received: list_iterator"),
        ("keras_callbacks", lambda self: [print], TypeError, "Received at index 0: builtin_function_or_method"),
    ],
)
def test_a_builder_returning_the_wrong_thing_is_a_clear_error(
    analytic_keras, tmp_path, method, returned, error, message
):
    broken = type("Broken", (analytic_keras.AnalyticKerasTrial,), {method: returned})
    # The cause of an earlier failure in this process, which this run must not report as its own.
    note(RootCause(0, "ValueError", "an earlier run's failure", "ValueError: an earlier run's failure"))
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        det.run_trial(broken, analytic_keras.make_config(tmp_path, 10))
    # Raised by the harness about what the method returned: the command shows the message, not its frames.
    cause = root_cause(raised.value, rank=0)
    assert cause.traceback == f"{cause.type}: {cause.message}"
    assert cause.message != "an earlier run's failure"


# A rank refuses the trial alone, before it trains: played here by one process as rank 0 of
# two. tests/distributed shows that such an error on a rank ends the job with its message.
@pytest.mark.parametrize(
    ("loader", "hparams", "message"),
    [
        ("tfdata", {"wrap_dataset": False}, "was never passed to context.wrap_dataset(). With 2 processes"),
        ("numpy", {"eagerly": True}, "compiled with run_eagerly=True and has ReducerMetric metrics"),
    ],
    ids=["a-dataset-not-wrapped", "exact-metrics-run-eagerly"],
)
def test_what_two_processes_cannot_run_is_refused_before_training(
    analytic_keras, tmp_path, one_rank_of_two, loader, hparams, message
):
    config = analytic_keras.make_config(tmp_path, 10, loader)
    config["hyperparameters"].update(hparams)
    with pytest.raises(det.DetEstimatorError, match=re.escape(message)):
        det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    assert not analytic_keras.events(tmp_path / "events"), "refused before any callback ran"


def test_a_searcher_metric_the_validation_lacks_is_named_with_those_it_has(analytic_keras, tmp_path):
    config = analytic_keras.make_config(tmp_path, 10)
    config["searcher"]["metric"] = "val_accuracy"
    with pytest.raises(det.core.SearcherMetricError, match="'val_accuracy' is not among .*val_loss"):
        det.run_trial(analytic_keras.AnalyticKerasTrial, config)


@pytest.mark.parametrize(("length", "batches"), [({"records": 100}, 12), ({"epochs": 2}, 16)])
def test_a_length_in_records_or_epochs_trains_its_batches(analytic_keras, tmp_path, length, batches):
    config = analytic_keras.make_config(tmp_path, 1)
    config["searcher"]["max_length"] = length  # 8 records per batch, 64 per epoch
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    assert outcome.batches_trained == batches
    analytic_keras.assert_closed_form(outcome.validations)


def test_a_model_compiled_to_run_eagerly_follows_the_closed_form_too(analytic_keras, tmp_path):
    config = analytic_keras.make_config(tmp_path, 10)
    config["hyperparameters"]["eagerly"] = True  # model.compile(run_eagerly=True): no tf.function to trace
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, config)
    analytic_keras.assert_closed_form(outcome.validations)


def test_a_nan_searcher_metric_is_never_the_best_so_later_improvements_are_checkpointed(analytic_keras, tmp_path):
    config = analytic_keras.make_config(tmp_path, 20)
    config["hyperparameters"]["nan_weight_before"] = 6  # NaN at the validation after 5 batches
    config["searcher"].update(metric="val_weight", smaller_is_better=False)  # the weight grows towards 3
    config["checkpoint_storage"].update(save_trial_latest=0, save_trial_best=10)
    outcome = det.run_trial(analytic_keras.AnalyticKerasTrial, config)

    weights = [v["metrics"]["val_weight"] for v in outcome.validations]
    assert np.isnan(weights[0]) and all(w > 0 for w in weights[1:])
    # checkpoint_policy "best": every validation after the NaN one improved, and was checkpointed.
    assert [c["batches"] for c in outcome.checkpoints] == [10, 15, 20]
    assert read_checkpoint(outcome.checkpoints[-1]["path"]).metadata["best_validation_metric"] == weights[-1]


def test_a_trial_whose_process_turned_eager_mode_off_is_refused_and_not_restarted(analytic_keras, tmp_path):
    # As a trial module that calls tf.compat.v1.disable_eager_execution() at its top, which
    # the reference system's documentation suggests: every restart would import it again.
    refused = pytest.raises(det.DetEstimatorError, match=r"disable_eager_execution\(\).*remove the call")
    with tf.Graph().as_default(), refused as raised:
        det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 10))
    assert isinstance(raised.value, RuntimeError)
    assert error_record(raised.value, rank=0)["permanent"]
