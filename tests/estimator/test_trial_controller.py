"""The trial controller on one process: the analytic trial, resumes, pauses, kills, exports."""

import gc
import json
import logging
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.errors import PermanentTrialError, TrialDefinitionError
from det_estimator.store import ExperimentStore

LEARNING_RATE, GLOBAL_BATCH = 0.01, 8


def checkpoints_of(tmp_path, name="analytic"):
    """The checkpoints of the run_trial runs named ``name`` whose storage is under tmp_path."""
    with ExperimentStore() as store:
        experiment = store.find_experiment(f"run_trial:{tmp_path / 'checkpoints' / name}")
        return TrialCheckpoints(store.trials(experiment.id)[0].checkpoint_dir)


def events(tmp_path, rank=0):
    path = tmp_path / "events" / f"rank{rank}.jsonl"
    return [json.loads(line)["event"] for line in path.read_text().splitlines()] if path.exists() else []


def final_weight(outcome):
    return outcome.validations[-1]["metrics"]["weight"]


def test_weights_metrics_and_checkpoints_follow_the_closed_form(analytic, tmp_path):
    outcome = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 20))

    assert (outcome.state, outcome.batches_trained) == ("COMPLETED", 20)
    assert [t["batches"] for t in outcome.training] == [5, 10, 15, 20]
    expected_losses = analytic.expected_workload_losses(20, 5, LEARNING_RATE, GLOBAL_BATCH)
    assert [t["metrics"]["loss"] for t in outcome.training] == pytest.approx(expected_losses, rel=1e-5)
    expected_means = analytic.expected_last_batch_means(20, 5, GLOBAL_BATCH)
    assert [t["metrics"]["mean_x"] for t in outcome.training] == pytest.approx(expected_means, rel=1e-6)
    assert [v["batches"] for v in outcome.validations] == [5, 10, 15, 20]
    for validation in outcome.validations:
        expected = analytic.expected_weight(validation["batches"], LEARNING_RATE, GLOBAL_BATCH)
        assert validation["metrics"]["weight"] == pytest.approx(expected, rel=1e-5)
        assert validation["metrics"]["records"] == analytic.NUM_RECORDS
    # save_trial_latest=1 and save_trial_best=1: the last checkpoint is both.
    (checkpoint,) = checkpoints_of(tmp_path).list()
    assert outcome.checkpoints == [{"uuid": checkpoint.uuid, "path": str(checkpoint.path), "batches": 20}]
    metadata = checkpoint.metadata
    assert metadata["batches_trained"] == 20 and metadata["hparams"]["learning_rate"] == LEARNING_RATE
    assert metadata["config"]["searcher"]["max_length"] == {"batches": 20}
    assert metadata["validation_metrics"]["weight"] == final_weight(outcome)
    files = set(metadata["files"])
    assert "hook_note.txt" in files and "raw/saved_model.pb" in files
    assert any(name.startswith("model/model.ckpt-20.") for name in files)
    assert events(tmp_path) == ["on_checkpoint_end"] * 4 + ["on_trial_close"]


def test_evaluations_leave_no_graph_alive_in_an_optimizer_with_slots(analytic, tmp_path, monkeypatch):
    # The model_fn builds its train_op in every mode, so each evaluation's graph gets
    # Adam's slots and beta powers, kept in the optimizer made once in build_estimator().
    from det_estimator.estimator._controller import EstimatorTrialController

    live_graphs = []
    validate = EstimatorTrialController._validate

    def counting_validate(self, local_checkpoint):
        metrics = validate(self, local_checkpoint)
        gc.collect()
        live_graphs.append(sum(isinstance(o, tf.Graph) for o in gc.get_objects()))
        return metrics

    monkeypatch.setattr(EstimatorTrialController, "_validate", counting_validate)
    config = analytic.make_config(tmp_path, 8, scheduling_unit=1, min_validation_period={"batches": 1})
    config["hyperparameters"]["adam"] = True
    outcome = det.run_trial(analytic.AnalyticTrial, config)

    assert outcome.state == "COMPLETED" and len(live_graphs) == 8
    assert live_graphs[-1] == live_graphs[1], live_graphs


def test_the_scratch_model_dir_keeps_one_local_checkpoint_however_many_validations(analytic, tmp_path, monkeypatch):
    from det_estimator.estimator._controller import EstimatorTrialController

    local_checkpoints = []
    validate = EstimatorTrialController._validate

    def counting_validate(self, local_checkpoint):
        local_checkpoints.append(len(list(Path(self._model_dir).glob("model.ckpt-*.index"))))
        return validate(self, local_checkpoint)

    monkeypatch.setattr(EstimatorTrialController, "_validate", counting_validate)
    # More validations than the 5 checkpoints a TensorFlow Saver keeps by default.
    config = analytic.make_config(tmp_path, 8, scheduling_unit=1, min_validation_period={"batches": 1})
    outcome = det.run_trial(analytic.AnalyticTrial, config)

    assert outcome.state == "COMPLETED" and len(local_checkpoints) == 8
    assert max(local_checkpoints) == 1, local_checkpoints


def test_a_resumed_trial_continues_where_it_stopped(analytic, tmp_path):
    first = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 10))
    assert first.batches_trained == 10
    second = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 20))
    assert [v["batches"] for v in second.validations] == [15, 20]
    assert final_weight(second) == pytest.approx(analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)
    assert events(tmp_path).count("on_checkpoint_load") == 1


def test_a_trial_resumed_at_its_operations_length_completes_it_and_trains_the_next(
    analytic, tmp_path, searcher_operations
):
    # As a search trial killed after its checkpoint at a rung's length, before reporting it,
    # then promoted at once when it reports on resume.
    first = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 10))
    completed = searcher_operations([10, 20])
    second = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 20))

    assert (second.state, second.batches_trained) == ("COMPLETED", 20)
    assert [v["batches"] for v in second.validations] == [15, 20]
    best_of_first = min(v["metrics"]["loss"] for v in first.validations)
    assert completed == [(10, best_of_first), (20, second.validations[-1]["metrics"]["loss"])]


def test_the_saved_model_predicts_what_the_estimator_predicts(analytic, tmp_path):
    outcome = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 10))
    path = outcome.checkpoints[-1]["path"]
    loaded = det.load_estimator_from_checkpoint_path(path)
    predictions = loaded.signatures["serving_default"](x=tf.constant(analytic.SERVING_INPUT))["y"].numpy()
    np.testing.assert_allclose(predictions, final_weight(outcome) * analytic.SERVING_INPUT, rtol=1e-6)

    same = det.load_estimator_from_checkpoint_path(path, serving_name="raw")
    assert "serving_default" in same.signatures
    with pytest.raises(ValueError, match=r"has no SavedModel named 'parsing'; its SavedModels are: raw\."):
        det.load_estimator_from_checkpoint_path(path, serving_name="parsing")
    with pytest.raises(ValueError, match="is not a checkpoint of an EstimatorTrial: it holds no model/ directory"):
        det.load_estimator_from_checkpoint_path(str(tmp_path))


def test_test_mode_runs_one_batch_one_validation_step_and_one_checkpoint(analytic, tmp_path):
    outcome = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 1000), test=True)
    assert outcome.batches_trained == 1
    assert [v["batches"] for v in outcome.validations] == [1]
    assert outcome.validations[0]["metrics"]["records"] == GLOBAL_BATCH  # a single validation batch
    assert len(outcome.checkpoints) == 1


def test_a_corrupted_latest_checkpoint_is_skipped_for_the_previous_one(analytic, tmp_path, caplog):
    config = analytic.make_config(tmp_path, 10)
    config["checkpoint_storage"]["save_trial_latest"] = 2
    det.run_trial(analytic.AnalyticTrial, config)
    older, latest = checkpoints_of(tmp_path).list()
    index = next((latest.path / "model").glob("*.index"))
    index.write_bytes(index.read_bytes()[:-1] + b"\x00")

    config["searcher"]["max_length"] = {"batches": 20}
    with caplog.at_level(logging.WARNING):
        outcome = det.run_trial(analytic.AnalyticTrial, config)
    assert f"{latest.path}" in caplog.text and "sha256 mismatch" in caplog.text
    assert [v["batches"] for v in outcome.validations] == [10, 15, 20]  # resumed after 5 batches
    assert final_weight(outcome) == pytest.approx(analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)
    assert latest.uuid not in {c.uuid for c in checkpoints_of(tmp_path).list()}
    assert (latest.path.parent / f".corrupt-{latest.uuid}" / "metadata.json").exists()  # kept for inspection


def test_a_corrupt_checkpoint_never_outranks_the_valid_ones_written_after_it(analytic, tmp_path):
    config = analytic.make_config(tmp_path, 10)
    config["checkpoint_storage"].update(save_trial_latest=2, save_trial_best=0)
    det.run_trial(analytic.AnalyticTrial, config)
    _, at_10 = checkpoints_of(tmp_path).list()
    (next((at_10.path / "model").glob("*.index"))).write_bytes(b"corrupt")

    # Resumed from batch 5, this run ends at batch 8, below the corrupt checkpoint's 10.
    config["searcher"]["max_length"] = {"batches": 8}
    config["checkpoint_storage"].update(save_trial_latest=1)
    outcome = det.run_trial(analytic.AnalyticTrial, config)
    latest = checkpoints_of(tmp_path).latest_valid()
    assert latest is not None and latest.steps_completed == 8 == outcome.batches_trained


def test_a_resumed_run_validates_a_full_period_after_the_last_validation(analytic, tmp_path):
    config = analytic.make_config(tmp_path, 7, scheduling_unit=1)  # min_validation_period: 5 batches
    first = det.run_trial(analytic.AnalyticTrial, config)
    assert [v["batches"] for v in first.validations] == [5, 7]  # the last one as the length ends

    config["searcher"]["max_length"] = {"batches": 20}
    resumed = det.run_trial(analytic.AnalyticTrial, config)
    assert [v["batches"] for v in resumed.validations] == [12, 17, 20]


def test_a_run_killed_at_a_random_batch_resumes_to_the_uninterrupted_result(analytic, runs, tmp_path):
    # The kill lands a few batches after the first checkpoint, 6 s and more before the end.
    process = runs.start(tmp_path, 30, slots=1, seconds_per_batch=0.25)
    runs.kill_at_random_batch(process, seed=11)
    outcome = det.run_trial(analytic.AnalyticTrial, analytic.make_config(tmp_path, 30))
    resumed_after = outcome.batches_trained - len(outcome.validations) * 5
    assert outcome.validations and resumed_after < 30, "the kill must interrupt training"
    assert outcome.batches_trained == 30
    assert final_weight(outcome) == pytest.approx(analytic.expected_weight(30, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5)


def test_sigterm_pauses_with_a_checkpoint_and_a_rerun_finishes(analytic, runs, tmp_path):
    process = runs.start(tmp_path, 400, slots=1, seconds_per_batch=0.05)
    runs.wait_for_line(process, "checkpoint")
    process.terminate()
    status, output, outcome = runs.finish(process)
    assert status == 0, output[-3000:]
    assert outcome["state"] == "PAUSED" and 5 <= outcome["batches_trained"] < 400
    paused_at = outcome["batches_trained"]
    assert outcome["checkpoints"][-1]["batches"] == paused_at

    config = analytic.make_config(tmp_path, paused_at + 3)
    resumed = det.run_trial(analytic.AnalyticTrial, config)
    expected = analytic.expected_weight(paused_at + 3, LEARNING_RATE, GLOBAL_BATCH)
    assert resumed.state == "COMPLETED" and final_weight(resumed) == pytest.approx(expected, rel=1e-5)


def test_a_workload_a_pause_ends_early_reports_its_scalar_summaries_too(analytic, tmp_path):
    class PauseAtSeventh(tf.estimator.SessionRunHook):
        def __init__(self):
            self.batches = 0

        def after_run(self, run_context, run_values):
            self.batches += 1
            if self.batches == 7:  # in the second workload of 5
                os.kill(os.getpid(), signal.SIGTERM)  # what `experiment pause` or Ctrl-C amount to

    class Paused(analytic.AnalyticTrial):
        def build_train_spec(self):
            spec = super().build_train_spec()
            return tf.estimator.TrainSpec(spec.input_fn, hooks=[*spec.hooks, PauseAtSeventh()])

    outcome = det.run_trial(Paused, analytic.make_config(tmp_path, 100))

    assert (outcome.state, outcome.batches_trained) == ("PAUSED", 8)  # the batch under way finishes
    assert [t["batches"] for t in outcome.training] == [5, 8]
    partial = outcome.training[-1]["metrics"]
    assert partial["loss"] == pytest.approx(np.mean(analytic.trajectory(8, LEARNING_RATE, GLOBAL_BATCH)[0][5:]))
    # The summary at the workload's last batch (the 8th: records 56 to 63), as a full workload reports it.
    assert partial["mean_x"] == pytest.approx(float(np.mean(analytic.FEATURES[56:64])), rel=1e-6)


def test_a_hook_requesting_stop_ends_training_with_a_final_checkpoint(analytic, tmp_path):
    class StopAfterSeven(tf.estimator.SessionRunHook):
        def __init__(self):
            self.batches = 0

        def after_run(self, run_context, run_values):
            self.batches += 1
            if self.batches == 7:
                run_context.request_stop()

    class EarlyStopping(analytic.AnalyticTrial):
        def build_train_spec(self):
            spec = super().build_train_spec()
            return tf.estimator.TrainSpec(spec.input_fn, hooks=[*spec.hooks, StopAfterSeven()])

    outcome = det.run_trial(EarlyStopping, analytic.make_config(tmp_path, 100))
    assert (outcome.state, outcome.batches_trained) == ("COMPLETED", 7)
    assert outcome.checkpoints[-1]["batches"] == 7


def repeated_validation(analytic, steps):
    """The analytic trial with a validation input that repeats forever, and the EvalSpec ``steps`` given."""

    class RepeatedValidation(analytic.AnalyticTrial):
        def build_validation_spec(self):
            spec = super().build_validation_spec()
            return tf.estimator.EvalSpec(lambda: spec.input_fn().repeat(), steps=steps)

    return RepeatedValidation


@pytest.mark.timeout(60)  # the evaluation of an infinite dataset never ended
def test_an_infinite_validation_dataset_without_steps_is_refused_at_once(analytic, tmp_path):
    with pytest.raises(TrialDefinitionError) as error:
        det.run_trial(repeated_validation(analytic, steps=None), analytic.make_config(tmp_path, 10))
    message = str(error.value)
    assert "build_validation_spec() returns an infinite tf.data.Dataset" in message
    assert "Do not repeat the validation data, or set" in message and "EvalSpec(input_fn, steps=N)" in message
    assert events(tmp_path)[-1] == "on_trial_close"


@pytest.mark.timeout(120)
def test_an_infinite_validation_dataset_with_steps_validates_those_batches(analytic, tmp_path):
    outcome = det.run_trial(repeated_validation(analytic, steps=3), analytic.make_config(tmp_path, 10))
    assert outcome.state == "COMPLETED"
    assert [validation["metrics"]["records"] for validation in outcome.validations] == [24, 24]


class PauseAtSecondCall:
    """Sends this process SIGTERM (what `experiment pause` amounts to) at its second call."""

    calls = 0

    def __call__(self, *args) -> None:
        self.calls += 1
        if self.calls == 2:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("work", ["validation", "checkpoint"])
def test_a_pause_asked_for_during_a_validation_or_checkpoint_stops_at_that_batch(analytic, tmp_path, work):
    pause = PauseAtSecondCall()

    class PauseInValidation(tf.estimator.SessionRunHook):
        def end(self, session):
            pause()

    class PauseInCheckpoint(det.RunHook):
        def on_checkpoint_end(self, checkpoint_dir):
            pause()

    class Paused(analytic.AnalyticTrial):
        def build_train_spec(self):
            spec = super().build_train_spec()
            hooks = [*spec.hooks, PauseInCheckpoint()] if work == "checkpoint" else spec.hooks
            return tf.estimator.TrainSpec(spec.input_fn, hooks=hooks)

        def build_validation_spec(self):
            spec = super().build_validation_spec()
            hooks = [PauseInValidation()] if work == "validation" else []
            return tf.estimator.EvalSpec(spec.input_fn, steps=spec.steps, hooks=hooks)

    outcome = det.run_trial(Paused, analytic.make_config(tmp_path, 40))
    assert (outcome.state, outcome.batches_trained) == ("PAUSED", 10)
    assert [c["batches"] for c in outcome.checkpoints] == [10]  # one checkpoint, with the validation's metrics
    assert [v["batches"] for v in outcome.validations] == [5, 10]


# A rank refuses the trial alone, before it trains: played here by one process as rank 0 of
# two. tests/distributed shows that such an error on a rank ends the job with its message.
@pytest.mark.parametrize(
    ("hparams", "missing"),
    [
        ({"wrap_optimizer": False}, "context.wrap_optimizer(optimizer)"),
        ({"wrap_dataset": False}, "context.wrap_dataset(dataset)"),
    ],
)
def test_a_trial_that_never_calls_a_wrapper_on_two_processes_is_told_which(
    analytic, tmp_path, one_rank_of_two, hparams, missing
):
    config = analytic.make_config(tmp_path, 10)
    config["hyperparameters"].update(hparams)
    with pytest.raises(det.DetEstimatorError, match=rf"The trial never called {re.escape(missing)}\. With 2 processes"):
        det.run_trial(analytic.AnalyticTrial, config)


def test_on_trial_close_runs_when_the_trial_fails(analytic, tmp_path):
    class BrokenValidation(analytic.AnalyticTrial):
        def build_validation_spec(self):
            return tf.estimator.EvalSpec(lambda: (_ for _ in ()).throw(OSError("validation data is gone")))

    with pytest.raises(OSError, match="validation data is gone"):
        det.run_trial(BrokenValidation, analytic.make_config(tmp_path, 10))
    assert events(tmp_path)[-1] == "on_trial_close"


@pytest.mark.parametrize(
    ("method", "returned", "message"),
    [
        ("build_estimator", lambda self: "not an estimator", "build_estimator() must return a tf.estimator.Estimator"),
        ("build_train_spec", lambda self: None, "build_train_spec() must return a tf.estimator.TrainSpec"),
        ("build_validation_spec", lambda self: [], "build_validation_spec() must return a tf.estimator.EvalSpec"),
        ("build_serving_input_receiver_fns", lambda self: {"a/b": print}, "Received: 'a/b'"),
        (
            "build_serving_input_receiver_fns",
            lambda self: [print],
            "build_serving_input_receiver_fns() must return a dict of name to serving_input_receiver_fn. "
            "Received: list",
        ),
    ],
)
def test_a_builder_returning_the_wrong_thing_is_a_clear_error(analytic, tmp_path, method, returned, message):
    broken = type("Broken", (analytic.AnalyticTrial,), {method: returned})
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        det.run_trial(broken, analytic.make_config(tmp_path, 10))


def test_a_trial_class_missing_a_builder_is_a_clear_error_that_no_restart_repeats(analytic, tmp_path):
    class WithoutValidationSpec(det.EstimatorTrial):
        build_estimator = analytic.AnalyticTrial.build_estimator
        build_train_spec = analytic.AnalyticTrial.build_train_spec

    message = r"WithoutValidationSpec does not define build_validation_spec\(\), which every EstimatorTrial must"
    with pytest.raises(TrialDefinitionError, match=message) as error:
        det.run_trial(WithoutValidationSpec, analytic.make_config(tmp_path, 10))
    assert isinstance(error.value, PermanentTrialError)


def test_a_trial_class_not_taking_the_context_is_a_clear_error_that_no_restart_repeats(analytic, tmp_path):
    class WithoutContextArgument(analytic.AnalyticTrial):
        def __init__(self):
            pass

    message = r"must take the trial's context as the one argument of its __init__.*Received: .*__init__\(\)"
    with pytest.raises(TrialDefinitionError, match=message) as error:
        det.run_trial(WithoutContextArgument, analytic.make_config(tmp_path, 10))
    assert isinstance(error.value, PermanentTrialError)


def test_the_same_seed_gives_the_same_metrics_step_for_step(analytic, tmp_path):
    def run(directory, seed):
        config = analytic.make_config(tmp_path / directory, 15, reproducibility={"experiment_seed": seed})
        config["hyperparameters"]["random"] = True
        return [v["metrics"] for v in det.run_trial(analytic.AnalyticTrial, config).validations]

    first, again, other_seed = run("a", 7), run("b", 7), run("c", 8)
    assert len(first) == 3 and first == again
    assert [m["weight"] for m in first] != [m["weight"] for m in other_seed]


@pytest.mark.parametrize("cached", [False, True], ids=["shuffled-in-input_fn", "cache_train_dataset-shuffle"])
def test_a_resumed_shuffled_run_sees_the_same_batches_as_an_uninterrupted_one(analytic, tmp_path, monkeypatch, cached):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def config(directory, batches):
        raw = analytic.make_config(tmp_path / directory, batches, reproducibility={"experiment_seed": 3})
        # Cached: the weight starts at 0, so only the cache's shuffle can move it off the in-order path.
        raw["hyperparameters"].update(random=not cached, cached=cached)
        return raw

    uninterrupted = det.run_trial(analytic.AnalyticTrial, config("straight", 20))
    det.run_trial(analytic.AnalyticTrial, config("resumed", 7))
    resumed = det.run_trial(analytic.AnalyticTrial, config("resumed", 20))
    assert final_weight(resumed) == final_weight(uninterrupted)
    # Shuffled data trains differently from the data in order: the shuffle really happened.
    in_order = analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH)
    assert final_weight(uninterrupted) != pytest.approx(in_order, rel=1e-6)


def test_a_resumed_run_draws_the_random_numbers_an_uninterrupted_one_would(analytic, tmp_path, recwarn):
    def config(directory, batches):
        raw = analytic.make_config(tmp_path / directory, batches, reproducibility={"experiment_seed": 5})
        raw["hyperparameters"]["noise"] = True  # dropout, normal, truncated normal and integer draws
        return raw

    uninterrupted = det.run_trial(analytic.AnalyticTrial, config("straight", 20))
    det.run_trial(analytic.AnalyticTrial, config("resumed", 7))
    resumed = det.run_trial(analytic.AnalyticTrial, config("resumed", 20))
    # Compared where both validated: the resumed run's periods count from its validation at 7.
    straight = {v["batches"]: v["metrics"]["weight"] for v in uninterrupted.validations}
    shared = [(v["batches"], v["metrics"]["weight"]) for v in resumed.validations if v["batches"] in straight]
    assert [batches for batches, _ in shared] == [20]
    assert all(weight == straight[batches] for batches, weight in shared)
    # The noise really changed training, so equal weights mean equal draws.
    in_order = analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH)
    assert final_weight(uninterrupted) != pytest.approx(in_order, rel=1e-3)
    assert not [w for w in recwarn if "random op" in str(w.message)], "every draw here is restorable"


def test_a_random_op_no_checkpoint_can_restore_is_named_in_a_warning(analytic, tmp_path):
    class Shuffling(analytic.AnalyticTrial):
        @staticmethod
        def _noisy(x):
            return tf.random.shuffle(x)

    config = analytic.make_config(tmp_path, 2)
    config["hyperparameters"]["noise"] = True
    with pytest.warns(RuntimeWarning, match=r"1 random op\(s\) whose state no checkpoint can hold \('RandomShuffle'\)"):
        det.run_trial(Shuffling, config)


def _recorded_skips(monkeypatch):
    """Records how many batches each run's training input skips."""
    from det_estimator.estimator import _controller

    skips = []
    original = _controller.training_input_fn

    def recording(input_fn, batches_to_skip):
        skips.append(batches_to_skip)
        return original(input_fn, batches_to_skip)

    monkeypatch.setattr(_controller, "training_input_fn", recording)
    return skips


def test_a_resume_restores_the_inputs_saved_position_instead_of_replaying_it(analytic, tmp_path, monkeypatch):
    skips = _recorded_skips(monkeypatch)

    def config(directory, batches):
        raw = analytic.make_config(tmp_path / directory, batches, reproducibility={"experiment_seed": 3})
        raw["hyperparameters"]["random"] = True  # a shuffle buffer, whose state the checkpoint holds too
        return raw

    uninterrupted = det.run_trial(analytic.AnalyticTrial, config("straight", 20))
    det.run_trial(analytic.AnalyticTrial, config("resumed", 7))
    resumed = det.run_trial(analytic.AnalyticTrial, config("resumed", 20))
    assert skips == [0, 0, 0]  # the resume skipped nothing: it restored the iterator
    assert final_weight(resumed) == final_weight(uninterrupted)
    checkpoint = checkpoints_of(tmp_path / "resumed").list()[-1]
    assert checkpoint.metadata["input_state_ranks"] == 1
    assert any(name.startswith("input/rank-0/input.ckpt") for name in checkpoint.metadata["files"])


def test_an_input_that_cannot_be_saved_is_replayed_to_its_position(analytic, tmp_path, monkeypatch):
    skips = _recorded_skips(monkeypatch)

    class Generated(analytic.AnalyticTrial):
        def _input_fn(self):
            def records():  # a generator: state no checkpoint can hold
                for x, y in zip(analytic.FEATURES, analytic.TARGETS):
                    yield {"x": x}, y

            spec = ({"x": tf.TensorSpec([], tf.float32)}, tf.TensorSpec([], tf.float32))
            dataset = self.context.wrap_dataset(tf.data.Dataset.from_generator(records, output_signature=spec))
            return dataset.batch(self.context.get_per_slot_batch_size())

    with pytest.warns(RuntimeWarning, match="a resume replays it from its start up to the saved position"):
        det.run_trial(Generated, analytic.make_config(tmp_path, 7))
    resumed = det.run_trial(Generated, analytic.make_config(tmp_path, 20))
    assert skips == [0, 7]
    assert checkpoints_of(tmp_path).list()[-1].metadata["input_state_ranks"] is None
    expected = analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH)
    assert final_weight(resumed) == pytest.approx(expected, rel=1e-5)


def test_a_nan_searcher_metric_is_never_the_best_so_later_improvements_are_checkpointed(analytic, tmp_path):
    config = analytic.make_config(tmp_path, 20)
    config["hyperparameters"]["nan_weight_before"] = 6  # NaN at the validation after 5 batches
    config["searcher"].update(metric="weight", smaller_is_better=False)  # the weight grows towards 3
    config["checkpoint_storage"].update(save_trial_latest=0, save_trial_best=10)
    outcome = det.run_trial(analytic.AnalyticTrial, config)

    weights = [v["metrics"]["weight"] for v in outcome.validations]
    assert np.isnan(weights[0]) and all(w > 0 for w in weights[1:])
    # checkpoint_policy "best": every validation after the NaN one improved, and was checkpointed.
    assert [c["batches"] for c in outcome.checkpoints] == [10, 15, 20]
    assert checkpoints_of(tmp_path).list()[-1].metadata["best_validation_metric"] == weights[-1]


def reference_period_batches(period: int, length: int) -> list:
    """The batches the reference validates (or checkpoints) at: every ``period`` batches, and where training ends."""
    return sorted(set(range(period, length + 1, period)) | {length})


@pytest.mark.slow
def test_periods_of_one_batch_validate_and_checkpoint_after_every_batch(analytic, tmp_path):
    # scheduling_unit stays at its default (100), longer than the whole run.
    config = analytic.make_config(
        tmp_path,
        64,
        min_validation_period={"batches": 1},
        min_checkpoint_period={"batches": 1},
        checkpoint_policy="none",
    )
    del config["scheduling_unit"]
    outcome = det.run_trial(analytic.AnalyticTrial, config)
    assert [v["batches"] for v in outcome.validations] == reference_period_batches(1, 64)
    assert events(tmp_path).count("on_checkpoint_end") == 64


def test_a_validation_period_shorter_than_the_scheduling_unit_is_kept_through_a_pause(analytic, tmp_path):
    class PauseAtFourth(tf.estimator.SessionRunHook):
        def __init__(self):
            self.batches = 0

        def after_run(self, run_context, run_values):
            self.batches += 1
            if self.batches == 4:
                os.kill(os.getpid(), signal.SIGTERM)  # the pause lands after the batch under way

    class Paused(analytic.AnalyticTrial):
        def build_train_spec(self):
            spec = super().build_train_spec()
            return tf.estimator.TrainSpec(spec.input_fn, hooks=[*spec.hooks, PauseAtFourth()])

    def make_config(directory):
        return analytic.make_config(directory, 10, scheduling_unit=100, min_validation_period={"batches": 3})

    expected = reference_period_batches(3, 10)
    assert expected == [3, 6, 9, 10]
    uninterrupted = det.run_trial(analytic.AnalyticTrial, make_config(tmp_path / "uninterrupted"))
    assert [v["batches"] for v in uninterrupted.validations] == expected

    paused = det.run_trial(Paused, make_config(tmp_path))
    paused_at = paused.batches_trained
    assert paused.state == "PAUSED" and 3 < paused_at < 6, "the pause must fall between two validations"
    assert [v["batches"] for v in paused.validations] == [3]
    resumed = det.run_trial(analytic.AnalyticTrial, make_config(tmp_path))
    assert resumed.state == "COMPLETED"
    assert [v["batches"] for v in resumed.validations] == [6, 9, 10]
    for before, after in zip(uninterrupted.validations[1:], resumed.validations):
        assert after["metrics"]["weight"] == pytest.approx(before["metrics"]["weight"], rel=1e-6)
