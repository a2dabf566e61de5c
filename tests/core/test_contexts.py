"""The Core API's train, checkpoint, preempt and searcher contexts, on a trial recorded in a store of the test's own."""

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest

from det_estimator import _info, core
from det_estimator._root_cause import error_record
from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.config import load_experiment_config
from det_estimator.core._checkpoint import merge_metadata
from det_estimator.core._preempt import PauseWatcher
from det_estimator.core._searcher import FixedLengths
from det_estimator.errors import DetEstimatorError, UndefinedHyperparameterError
from det_estimator.launcher import free_port
from det_estimator.store import ExperimentStore, MetricKind, State, StoreFullError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from memory_store import MemoryStore  # noqa: E402

_FORK = multiprocessing.get_context("fork")


def make_config(tmp_path, **checkpoint_storage):
    return load_experiment_config(
        {
            "name": "core",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"global_batch_size": 4, "lr": 0.5},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"records": 40}},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(tmp_path / "checkpoints"),
                **checkpoint_storage,
            },
            "reproducibility": {"experiment_seed": 3},
        }
    )


def record_trial(store, config, tmp_path, trials=1, pause_file=None, hparams=None):
    """Records an experiment with ``trials`` trials; returns the info of a run of the last one."""
    experiment_id = store.create_experiment("core", config.to_dict(), str(tmp_path), config.entrypoint, 1, False)
    hparams = {"global_batch_size": 4, "lr": 0.5} if hparams is None else hparams
    for _ in range(trials):
        trial_id = store.create_trial(experiment_id, hparams, 3, tmp_path / "checkpoints")
    run_id = store.start_run(trial_id)
    trial = store.trial(trial_id)
    return _info.ClusterInfo(
        task_type="TRIAL",
        trial=_info.TrialInfo(trial_id, experiment_id, 3, trial.hparams, config.to_dict(), run_id),
        latest_checkpoint=None,
        user_data={},
        store_path=str(store.path),
        checkpoint_dir=trial.checkpoint_dir,
        pause_file=pause_file,
    )


@pytest.fixture
def store(tmp_path):
    """The store the contexts are handed: in memory, as the contexts only need what it records and reads back."""
    return MemoryStore(tmp_path / "store-files")


@pytest.fixture
def info(store, tmp_path):
    return record_trial(store, make_config(tmp_path), tmp_path)


@pytest.fixture
def sqlite_store(tmp_path):
    """A store on disk, for contexts built in other processes (forked, or started), which open it by its path."""
    with ExperimentStore(tmp_path / "store.sqlite") as opened:
        yield opened


@pytest.fixture
def sqlite_info(sqlite_store, tmp_path):
    return record_trial(sqlite_store, make_config(tmp_path), tmp_path)


def save(core_context, steps, content="weights", **metadata):
    with core_context.checkpoint.store_path({"steps_completed": steps, **metadata}) as (path, storage_id):
        (path / "model.txt").write_text(content)
    return storage_id


def test_a_hyperparameter_the_config_lacks_is_an_error_naming_those_it_defines(info):
    # What a script reads itself, as the README's example does: a restart would fail the same way.
    for hparams in (info.trial.hparams, _info.ClusterInfo.from_json(info.to_json()).trial.hparams):
        with pytest.raises(UndefinedHyperparameterError) as raised:
            hparams["learning_rate"]
        assert str(raised.value) == (
            "Hyperparameter 'learning_rate' is not defined in the experiment config; "
            "the defined hyperparameters are: global_batch_size, lr"
        )
        assert isinstance(raised.value, KeyError) and hparams.get("learning_rate") is None
        assert hparams == {"global_batch_size": 4, "lr": 0.5}


def test_the_context_holds_the_trials_config_parsed_once_or_the_one_its_builder_parsed(store, info, tmp_path):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        assert core_context.config == make_config(tmp_path)
    parsed = make_config(tmp_path)
    with core.build_context(info, core.DummyDistributedContext(), config=parsed, store=store) as core_context:
        assert core_context.config is parsed


def test_metrics_and_progress_reach_the_store(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        assert store.trial(info.trial.trial_id).max_batches is None
        next(core_context.searcher.operations())
        # records 40 at a global batch size of 4: 10 batches, known once the operation is given
        assert store.trial(info.trial.trial_id).max_batches == 10
        core_context.train.report_training_metrics(5, {"loss": 0.5})
        core_context.train.report_validation_metrics(5, {"loss": 0.25, "accuracy": 0.75})
        core_context.train.report_progress(0.7)  # held back: written at most once a second
        core_context.train.report_progress(0.8)
        assert store.trial(info.trial.trial_id).batches_trained == 5
        assert core_context.train.get_experiment_best_validation() == 0.25
        assert Path(core_context.train.get_tensorboard_path()) == Path(store.trial(info.trial.trial_id).tensorboard_dir)
    assert store.trial(info.trial.trial_id).batches_trained == 8  # the last value, written on close
    records = store.metrics(info.trial.trial_id, MetricKind.VALIDATION, run_id=info.trial.run_id)
    assert [(r.batches, r.metrics) for r in records] == [(5, {"loss": 0.25, "accuracy": 0.75})]


def test_progress_in_records_without_a_global_batch_size_is_not_taken_for_batches(store, tmp_path):
    # A script's own batch size is unknown: 40 records are not 40 batches, for the display
    # nor for the summary's "after N batches".
    info = record_trial(store, make_config(tmp_path), tmp_path, hparams={"lr": 0.5})
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        op = next(core_context.searcher.operations())
        assert op.length == 40
        core_context.train.report_training_metrics(10, {"loss": 0.5})
        op.report_progress(40)
        core_context.train.report_progress(1.0)
        core_context.train.report_validation_metrics(10, {"loss": 0.25})
        op.report_completed(0.25)
    trial = store.trial(info.trial.trial_id)
    assert (trial.batches_trained, trial.max_batches) == (10, None)


def test_numpy_scalars_are_reported_and_checkpointed_as_python_numbers(store, info):
    # What a script computes with NumPy or TensorFlow (loss.numpy() is a numpy.float32).
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        op = next(core_context.searcher.operations())
        core_context.train.report_training_metrics(5, {"loss": np.float32(0.5), "records": np.int64(20)})
        core_context.train.report_validation_metrics(5, {"loss": np.float32(0.25)})
        storage_id = save(core_context, np.int64(5))
        op.report_completed(np.float32(0.25))
        assert next(core_context.searcher.operations(), None) is None
    (training,) = store.metrics(info.trial.trial_id, MetricKind.TRAINING)
    assert training.metrics == {"loss": 0.5, "records": 20} and type(training.metrics["records"]) is int
    (validation,) = store.metrics(info.trial.trial_id, MetricKind.VALIDATION)
    assert validation.metrics == {"loss": 0.25}
    assert store.checkpoint(storage_id).batches == 5


def test_a_metric_the_store_cannot_record_is_refused_on_every_process_naming_it(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        with pytest.raises(TypeError, match=r"report_training_metrics\(\): metric 'weights' is a ndarray"):
            core_context.train.report_training_metrics(1, {"loss": 0.5, "weights": np.zeros(3)})
        with pytest.raises(TypeError, match=r"report_validation_metrics\(\): metric 'model' is a object"):
            core_context.train.report_validation_metrics(1, {"loss": 0.5, "model": object()})
    # A process other than the chief records nothing, and still refuses what the chief could not record.
    worker = core.TrainContext(core.DummyDistributedContext(), recorder=None)
    with pytest.raises(TypeError, match="metric 'weights' is a ndarray"):
        worker.report_training_metrics(1, {"weights": np.zeros(3)})
    assert store.metrics(info.trial.trial_id, MetricKind.TRAINING) == []


def test_a_validation_without_the_searcher_metric_names_the_metrics_it_has(store, info):
    with (
        core.build_context(info, core.DummyDistributedContext(), store=store) as core_context,
        pytest.raises(core.SearcherMetricError) as raised,
    ):
        core_context.train.report_validation_metrics(5, {"val_loss": 0.2, "accuracy": 0.5})
    assert str(raised.value) == (
        "searcher.metric 'loss' is not among the validation metrics: accuracy, val_loss. "
        "Name one of them in the experiment config."
    )


@pytest.mark.parametrize("value", ["0.25", None, [0.25], True])
def test_a_searcher_metric_that_is_not_a_number_is_refused_naming_what_was_reported(store, info, value):
    # A search could rank no trial by it, and a single trial would end COMPLETED with no best validation.
    with (
        core.build_context(info, core.DummyDistributedContext(), store=store) as core_context,
        pytest.raises(core.SearcherMetricError) as raised,
    ):
        core_context.train.report_validation_metrics(5, {"loss": value, "accuracy": 0.5})
    assert str(raised.value) == (
        f"searcher.metric 'loss' must be a number; the validation reported {value!r} "
        f"({type(value).__name__}). Report it as a float, or name a numeric metric in the experiment config."
    )
    assert store.metrics(info.trial.trial_id, MetricKind.VALIDATION) == []


def test_a_nan_searcher_metric_is_a_number_and_recorded(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        core_context.train.report_validation_metrics(5, {"loss": float("nan")})
        core_context.train.report_validation_metrics(6, {"loss": np.int64(1)})
    assert len(store.metrics(info.trial.trial_id, MetricKind.VALIDATION)) == 2


def test_checkpoints_are_sealed_recorded_found_and_deleted(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        first = save(core_context, 5, "first")
        core_context.train.report_validation_metrics(5, {"loss": 0.5})  # after the checkpoint: joins it
        with core_context.checkpoint.restore_path(first) as path:
            assert (path / "model.txt").read_text() == "first"
        metadata = core_context.checkpoint.get_metadata(first)
        assert metadata["steps_completed"] == 5 and metadata["validation_metrics"] == {"loss": 0.5}
        # The metrics made metadata.json longer: the size recorded is the files' size on disk.
        recorded = store.checkpoint(first)
        assert recorded.size_bytes == sum(p.stat().st_size for p in Path(recorded.path).rglob("*") if p.is_file())
        copied = Path(info.checkpoint_dir).parent / "copy"
        core_context.checkpoint.download(first, copied)
        assert (copied / "model.txt").read_text() == "first"
        with pytest.raises(ValueError, match="must hold `steps_completed`"):
            save(core_context, None)
        with (
            pytest.raises(RuntimeError, match="nothing kept"),
            core_context.checkpoint.store_path({"steps_completed": 6}) as (path, _),
        ):
            (path / "half.txt").write_text("half")
            raise RuntimeError("a crash in the middle: nothing kept")
        second = save(core_context, 10)
        core_context.checkpoint.delete([second])
    (record,) = [c for c in store.checkpoints(info.trial.experiment_id, include_deleted=True) if c.uuid == first]
    assert record.validation_metrics == {"loss": 0.5}
    assert [c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()] == [first]
    assert store.checkpoint(second).state == "DELETED"
    with pytest.raises(core.CheckpointError, match=f"There is no checkpoint '{second}'"):
        core.build_context(info, core.DummyDistributedContext(), store=store).checkpoint.get_metadata(second)


def test_delete_takes_one_storage_id_as_the_reference_does_or_a_list(store, tmp_path):
    info = record_trial(store, make_config(tmp_path, save_trial_latest=3), tmp_path)
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        first, second, third = save(core_context, 1), save(core_context, 2), save(core_context, 3)
        core_context.checkpoint.delete(first)
        core_context.checkpoint.delete([second])
        with pytest.raises(TypeError, match="storage id"):
            core_context.checkpoint.delete(3)
    assert [c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()] == [third]
    assert store.checkpoint(first).state == store.checkpoint(second).state == "DELETED"


def test_delete_is_for_the_chief_and_a_later_validation_of_its_step_does_not_look_for_it(store, info, caplog):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        storage_id = save(core_context, 5)
        core_context.checkpoint.delete(storage_id)
        core_context.train.report_validation_metrics(5, {"loss": 0.5})
    assert "validation metrics not stored" not in caplog.text
    worker = core.CheckpointContext(types.SimpleNamespace(rank=1, size=2), info.checkpoint_dir)
    kept = save(core.build_context(info, core.DummyDistributedContext(), store=store), 6)
    with pytest.raises(core.CheckpointError, match=r"checkpoint.delete\(\) is for the chief only; process 1 called"):
        worker.delete(kept)
    assert [c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()] == [kept]


def test_retention_keeps_the_latest_and_the_best_of_the_trial(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        best = save(core_context, 2, validation_metrics={"loss": 0.1})
        save(core_context, 4, validation_metrics={"loss": 0.3})
        latest = save(core_context, 6, validation_metrics={"loss": 0.2})
    assert {c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()} == {best, latest}


def test_retention_that_cannot_record_a_deletion_leaves_the_checkpoint_in_place(store, info, monkeypatch):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        first = save(core_context, 2, validation_metrics={"loss": 0.3})

        def store_full(self, uuids):
            raise StoreFullError(f"The store {self.path} cannot be written: database or disk is full")

        monkeypatch.setattr(MemoryStore, "mark_checkpoints_deleted", store_full)
        with pytest.raises(StoreFullError):
            save(core_context, 4, validation_metrics={"loss": 0.1})  # retention would delete the first
    # The store still lists the first checkpoint as kept: its files must be there.
    assert store.checkpoint(first).state == "COMPLETED"
    assert first in {c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()}


def test_save_experiment_best_keeps_the_best_checkpoint_over_all_trials(store, tmp_path):
    config = make_config(tmp_path, save_trial_latest=1, save_trial_best=0, save_experiment_best=1)
    info = record_trial(store, config, tmp_path, trials=2)
    first_trial = store.trials(info.trial.experiment_id)[0].id
    store.record_checkpoint(first_trial, "other", 3, "/elsewhere", 1, {"validation_metrics": {"loss": 0.4}})
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        experiment_best = save(core_context, 2, validation_metrics={"loss": 0.1})
        save(core_context, 4, validation_metrics={"loss": 0.3})
        latest = save(core_context, 6, validation_metrics={"loss": 0.5})
    # Without save_experiment_best the first would go: it is neither the latest nor kept as trial best.
    assert {c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()} == {experiment_best, latest}


def _sharded(rank, info_json, port, results):
    os.environ["DET_CHIEF_PORT"] = str(port)
    info = _info.ClusterInfo.from_json(info_json)
    distributed = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1)
    with core.build_context(info, distributed) as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 3}, shard=True) as (path, storage_id):
            (path / f"rank{rank}.txt").write_text(str(rank))
        results.put((rank, storage_id))
        if rank == 1:
            try:
                with core_context.checkpoint.store_path({"steps_completed": 1}):
                    pass
            except core.CheckpointError as error:
                results.put((rank, str(error)))


def test_a_sharded_checkpoint_holds_every_process_files(sqlite_info):
    info = sqlite_info  # the processes open the store by its path
    results = _FORK.Queue()
    port = free_port()
    processes = [_FORK.Process(target=_sharded, args=(rank, info.to_json(), port, results)) for rank in range(2)]
    for process in processes:
        process.start()
    reported = [results.get(timeout=60) for _ in range(3)]
    for process in processes:
        process.join(timeout=30)
    storage_ids = {value for rank, value in reported if len(value) == 32}
    assert len(storage_ids) == 1
    (checkpoint,) = TrialCheckpoints(info.checkpoint_dir).list()
    assert checkpoint.uuid in storage_ids and not checkpoint.verify()
    assert sorted(checkpoint.metadata["files"]) == ["rank0.txt", "rank1.txt"]
    assert any("is for the chief only; process 1 called it" in value for _, value in reported)


def test_upload_refuses_to_write_an_empty_checkpoint_and_restore_path_takes_a_selector(store, info, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.txt").write_text("weights")
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        with pytest.raises(core.CheckpointError, match=r"upload\(ckpt_dir=None, shard=False\) would write an empty"):
            core_context.checkpoint.upload(None, {"steps_completed": 1})
        with pytest.raises(core.CheckpointError, match=r"upload\(ckpt_dir=None, shard=True\) on every process"):
            core_context.checkpoint.upload(None, {"steps_completed": 1}, shard=True)
        storage_id = core_context.checkpoint.upload(source, {"steps_completed": 2}, shard=True)
        with core_context.checkpoint.restore_path(storage_id, selector=lambda name: name == "model.txt") as path:
            assert (path / "model.txt").read_text() == "weights"
    assert [c.uuid for c in TrialCheckpoints(info.checkpoint_dir).list()] == [storage_id]


def _sharded_uploads(rank, info_json, port, shared, results):
    os.environ["DET_CHIEF_PORT"] = str(port)
    info = _info.ClusterInfo.from_json(info_json)
    distributed = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1)
    own = Path(shared).parent / f"rank{rank}"
    own.mkdir()
    (own / "model.txt").write_text(f"rank {rank}'s half")
    (own / f"only{rank}.txt").write_text(str(rank))
    with core.build_context(info, distributed) as core_context:
        upload = core_context.checkpoint.upload
        results.put((rank, "same directory", upload(shared, {"steps_completed": 1}, shard=True)))
        try:
            upload(own, {"steps_completed": 2}, shard=True)
            results.put((rank, "both hold model.txt", "uploaded"))
        except core.CheckpointError as error:
            results.put((rank, "both hold model.txt", str(error)))


def test_sharded_uploads_copy_a_shared_directory_once_and_refuse_files_two_processes_hold(sqlite_info, tmp_path):
    info = sqlite_info  # the processes open the store by its path
    # A file from two processes' directories would be one process's, silently.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "model.txt").write_text("the same for every process")
    results = _FORK.Queue()
    port = free_port()
    processes = [
        _FORK.Process(target=_sharded_uploads, args=(rank, info.to_json(), port, str(shared), results))
        for rank in range(2)
    ]
    for process in processes:
        process.start()
    reported = {(rank, case): value for rank, case, value in (results.get(timeout=60) for _ in range(4))}
    for process in processes:
        process.join(timeout=30)
    storage_id = reported[0, "same directory"]
    assert reported[1, "same directory"] == storage_id
    (checkpoint,) = TrialCheckpoints(info.checkpoint_dir).list()
    assert checkpoint.uuid == storage_id and sorted(checkpoint.metadata["files"]) == ["model.txt"]
    for rank in range(2):
        assert reported[rank, "both hold model.txt"] == (
            "upload(shard=True) refuses files that several processes' directories hold, as one would overwrite "
            "the other: 'model.txt' from processes [0, 1]. Give each process's files names of their own."
        )


@pytest.mark.parametrize(
    ("all_metadata", "merged", "conflicts"),
    [
        ([{"a": 1}, {"b": 2}], {"a": 1, "b": 2}, {}),
        ([{"a": 1}, {"a": 1}], {"a": 1}, {}),
        ([{"a": {"c": 1}}, {"a": {"d": 1}}], {"a": {"c": 1, "d": 1}}, {}),
        ([{"a": 1}, {"a": 2}, {"a": 3}], {"a": 1}, {"a": [0, 1, 2]}),
        ([{"a": {"c": 1}}, {"a": 1}], {"a": {"c": 1}}, {"a": [0, 1]}),
        ([{"a": 1}, {"a": {"c": 1}}], {"a": 1}, {"a": [0, 1]}),
        ([{}, {"a": {"c": 1}}, {"a": {"c": 2}}], {"a": {"c": 1}}, {"a/c": [1, 2]}),
    ],
)
def test_the_processes_metadata_merge_as_the_references(all_metadata, merged, conflicts):
    assert merge_metadata(all_metadata) == (merged, conflicts)


def _sharded_metadata(rank, info_json, port, results):
    os.environ["DET_CHIEF_PORT"] = str(port)
    info = _info.ClusterInfo.from_json(info_json)
    distributed = core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1)
    with core.build_context(info, distributed) as core_context:
        metadata = {"steps_completed": 3, "offsets": {str(rank): rank * 10}, f"only{rank}": True}
        with core_context.checkpoint.store_path(metadata, shard=True) as (path, storage_id):
            (path / f"rank{rank}.txt").write_text(str(rank))
        results.put((rank, "merged", storage_id))
        try:
            with core_context.checkpoint.store_path({"steps_completed": 4 + rank}, shard=True) as (path, _):
                (path / f"rank{rank}.txt").write_text(str(rank))
            results.put((rank, "conflict", "kept"))
        except core.CheckpointError as error:
            results.put((rank, "conflict", str(error)))


def test_a_sharded_checkpoint_holds_every_process_metadata_and_refuses_conflicting_values(sqlite_info):
    info = sqlite_info  # the processes open the store by its path
    results = _FORK.Queue()
    port = free_port()
    processes = [
        _FORK.Process(target=_sharded_metadata, args=(rank, info.to_json(), port, results)) for rank in range(2)
    ]
    for process in processes:
        process.start()
    reported = {(rank, case): value for rank, case, value in (results.get(timeout=60) for _ in range(4))}
    for process in processes:
        process.join(timeout=30)
    (checkpoint,) = TrialCheckpoints(info.checkpoint_dir).list()
    assert checkpoint.uuid == reported[0, "merged"] == reported[1, "merged"]
    assert checkpoint.metadata["offsets"] == {"0": 0, "1": 10}
    assert checkpoint.metadata["only0"] is checkpoint.metadata["only1"] is True
    for rank in range(2):
        assert reported[rank, "conflict"].startswith("store_path(shard=True): the processes' metadata differ")
        assert "'steps_completed' from processes [0, 1]" in reported[rank, "conflict"]


def test_the_pause_file_and_signals_reach_should_preempt_and_its_acknowledgement_is_recorded(store, tmp_path):
    pause_file = tmp_path / "pause"
    info = record_trial(store, make_config(tmp_path), tmp_path, pause_file=str(pause_file))
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        assert not core_context.preempt.should_preempt()
        pause_file.touch()
        for _ in range(100):
            if core_context.preempt.requested_locally():
                break
            time.sleep(0.05)
        assert core_context.preempt.should_preempt()
    assert store.trial_run(info.trial.run_id).preempted

    other = record_trial(store, make_config(tmp_path), tmp_path)
    with core.build_context(other, core.DummyDistributedContext(), store=store) as core_context:
        os.kill(os.getpid(), signal.SIGTERM)  # becomes a pause request, not the end of the process
        assert core_context.preempt.should_preempt(auto_ack=False)
    assert not store.trial_run(other.trial.run_id).preempted
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is put back


# A trial process whose launcher is the sleeper started by the test; it reports PAUSE_ASKED,
# LAUNCHER_KILLED and SEALED on stdout and takes its orders from stdin.
_ORPHAN_RUN = """
import dataclasses, os, signal, sys, time
from det_estimator import _info, core
from det_estimator.store import launcher_columns

info = _info.ClusterInfo.from_json(open(sys.argv[1]).read())
info = _info.ClusterInfo.from_json(dataclasses.replace(info, launcher=launcher_columns(int(sys.argv[2]))).to_json())
with core.build_context(info, core.DummyDistributedContext()) as core_context:
    if sys.argv[3] == "pause":
        os.kill(os.getpid(), signal.SIGTERM)  # the SIGTERM horovodrun's helpers send when horovodrun dies
        print("PAUSE_ASKED", flush=True)
        sys.stdin.readline()  # the launcher is killed meanwhile
        time.sleep(30)
    else:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "model.txt").write_text("weights")
            print("WRITING", flush=True)
            sys.stdin.readline()  # the launcher is killed meanwhile
    print("SEALED", flush=True)
"""


@pytest.mark.parametrize("moment", ["pause", "checkpoint"])
def test_a_launched_process_whose_launcher_is_gone_ends_without_writing_a_checkpoint(
    sqlite_store, sqlite_info, tmp_path, moment
):
    store, info = sqlite_store, sqlite_info  # the process opens the store by its path
    # A run on several slots: killing its launcher kills horovodrun, whose helpers only
    # SIGTERM the trial's processes. A resume may start at once; a checkpoint sealed now
    # (and the retention after it) would race with the new run's start.
    info_path = tmp_path / "info.json"
    info.write(info_path)
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    run = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_RUN, str(info_path), str(launcher.pid), moment],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout.readline().strip() in ("PAUSE_ASKED", "WRITING")
        launcher.kill()
        launcher.wait()  # reaped, as a shell reaps the command it ran
        run.stdin.write("go on\n")
        run.stdin.flush()
        assert run.wait(timeout=20) == 1
        assert "SEALED" not in run.stdout.read()
    finally:
        run.kill()
        launcher.kill()
    assert TrialCheckpoints(info.checkpoint_dir).list() == []
    assert store.checkpoints(info.trial.experiment_id) == []


def test_a_launched_process_goes_on_while_its_launcher_lives(sqlite_info, tmp_path):
    info = sqlite_info  # the process opens the store by its path
    info_path = tmp_path / "info.json"
    info.write(info_path)
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        run = subprocess.run(
            [sys.executable, "-c", _ORPHAN_RUN, str(info_path), str(launcher.pid), "checkpoint"],
            input="go on\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        launcher.kill()
    assert run.returncode == 0 and "SEALED" in run.stdout, run.stderr
    assert len(TrialCheckpoints(info.checkpoint_dir).list()) == 1


def test_experiment_pause_through_the_store_reaches_the_chief(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        store.request_pause(info.trial.experiment_id)
        for _ in range(100):
            if core_context.preempt.requested_locally():
                break
            time.sleep(0.05)
        assert core_context.preempt.should_preempt()


def test_the_single_searcher_gives_one_operation_of_max_length_in_its_unit(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        assert core_context.searcher.get_configured_units() == core.Unit.RECORDS
        operations = core_context.searcher.operations()
        op = next(operations)
        assert op.length == 40
        op.report_progress(20)  # records: half of the 10 batches
        for not_a_number in ("done", True, [0.5, 0.6], {"loss": 0.5}):
            with pytest.raises(DetEstimatorError, match=r"takes the value of the searcher metric, a number"):
                op.report_completed(not_a_number)
        op.report_completed(np.array(0.5, dtype=np.float32))  # a 0-d array is a number
        with pytest.raises(DetEstimatorError, match="may be called only once"):
            op.report_completed(0.5)
        assert next(operations, None) is None


def test_an_operation_left_uncompleted_is_an_error(store, info):
    with core.build_context(info, core.DummyDistributedContext(), store=store) as core_context:
        operations = core_context.searcher.operations()
        next(operations)
        with pytest.raises(DetEstimatorError, match=r"Call op.report_completed\(searcher_metric\) on each operation"):
            next(operations)


def test_misuses_of_the_searcher_and_preempt_contexts_are_permanent_so_not_restarted():
    # The same script would misuse them the same way on every restart, after training again.
    worker = core.DistributedContext.__new__(core.DistributedContext)
    worker.rank, worker.size = 1, 2
    op = core.SearcherOperation(10, is_chief=False, on_progress=lambda length: None)
    preempt = core.PreemptContext(worker, PauseWatcher(), mode=core.PreemptMode.ChiefOnly)
    searcher = core.SearcherContext(worker, FixedLengths([10]), core.Unit.BATCHES)
    for misuse in (
        lambda: op.report_completed(0.5),
        lambda: op.report_progress(5),
        preempt.should_preempt,
        lambda: next(searcher.operations(core.SearcherMode.ChiefOnly)),
    ):
        with pytest.raises(DetEstimatorError) as raised:
            misuse()
        assert error_record(raised.value, 1).get("permanent"), raised.value


def test_core_init_off_an_experiment_records_a_run_and_its_end(tmp_path, monkeypatch, own_store):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(_info.INFO_VARIABLE, raising=False)
    with core.init() as core_context:
        info = core_context.info
        assert _info.get_cluster_info() is info and info.trial.hparams == {}
        (op,) = list(_single(core_context))
        assert op == 1  # no config: one operation of length 1, as the reference
        core_context.train.report_validation_metrics(1, {"accuracy": 0.5})  # no searcher metric to insist on
    assert _info.get_cluster_info() is None
    with ExperimentStore(own_store) as store:
        (experiment,) = store.experiments()
        assert experiment.state == State.COMPLETED and experiment.command[1:] == sys.argv
        assert Path(store.trial(info.trial.trial_id).checkpoint_dir).is_relative_to(tmp_path / "checkpoints")

    with pytest.raises(ZeroDivisionError), core.init(config={"name": "failing"}):
        print(1 / 0)
    with ExperimentStore(own_store) as store:
        failed = store.experiments()[-1]
        assert (failed.name, failed.state) == ("failing", State.ERROR)
        (run,) = store.trial_runs(store.trials(failed.id)[0].id)
        assert run.error["type"] == "ZeroDivisionError" and "1 / 0" in run.error["traceback"]


def test_core_init_records_in_the_postgresql_store_the_variable_names(tmp_path, monkeypatch, postgres_url):
    # The same parser as --store: the variable may name a database as well as a file.
    monkeypatch.setenv("DET_ESTIMATOR_STORE", postgres_url)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(_info.INFO_VARIABLE, raising=False)
    with core.init() as core_context:
        (op,) = list(_single(core_context))
        core_context.train.report_validation_metrics(1, {"accuracy": 0.5})
        trial_id = core_context.info.trial.trial_id
    with ExperimentStore(postgres_url) as store:
        (experiment,) = store.experiments()
        assert experiment.state == State.COMPLETED
        assert [m.metrics for m in store.metrics(trial_id, "validation")] == [{"accuracy": 0.5}]


@pytest.mark.parametrize(
    ("exit_code", "paused", "state"),
    [(0, True, State.PAUSED), (None, False, State.COMPLETED), (3, False, State.ERROR)],
)
def test_a_script_run_by_hand_that_calls_sys_exit_ends_as_its_status_says(
    tmp_path, monkeypatch, own_store, exit_code, paused, state
):
    # sys.exit(0) once should_preempt() said so is how a script stops to be resumed.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(_info.INFO_VARIABLE, raising=False)
    with pytest.raises(SystemExit), core.init() as core_context:
        if paused:
            core_context.preempt._watcher.request()
            assert core_context.preempt.should_preempt()
        sys.exit(exit_code)
    with ExperimentStore(own_store) as store:
        (experiment,) = store.experiments()
        assert experiment.state == state


def _single(core_context):
    for op in core_context.searcher.operations():
        op.report_completed(0.0)
        yield op.length


def test_reporting_and_checkpointing_through_core_load_no_tensorflow(tmp_path):
    # A script on the Core API may have nothing to do with TensorFlow; it must not pay for importing it.
    code = textwrap.dedent(
        f"""
        import os, sys
        os.chdir({str(tmp_path)!r})
        os.environ["DET_ESTIMATOR_STORE"] = {str(tmp_path / "store.sqlite")!r}
        import det_estimator as det
        with det.core.init(config={{"name": "plain", "searcher": {{"name": "single", "metric": "loss",
                                    "max_length": {{"batches": 2}}}}}}) as core:
            for op in core.searcher.operations():
                core.train.report_training_metrics(2, {{"loss": 1.0}})
                with core.checkpoint.store_path({{"steps_completed": 2}}) as (path, _):
                    (path / "w.txt").write_text("1")
                core.train.report_validation_metrics(2, {{"loss": 0.5}})
                op.report_completed(0.5)
        print(sorted(name for name in sys.modules if name.split(".")[0] in ("tensorflow", "horovod")))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert list((tmp_path / "store-files").rglob("events.out.tfevents.*"))


@pytest.mark.parametrize(("paused", "kept"), [(False, {"best"}), (True, {"best", "latest"})])
def test_save_trial_latest_0_lets_the_latest_go_once_a_script_run_by_hand_completes(
    tmp_path, monkeypatch, own_store, paused, kept
):
    # While the run may still be resumed its latest checkpoint stays; once it completed, nothing resumes it.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(_info.INFO_VARIABLE, raising=False)
    config = {
        "name": "by hand",
        "searcher": {"name": "single", "metric": "auc", "smaller_is_better": False, "max_length": {"batches": 3}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 0},
    }
    with core.init(config=config) as core_context:
        written = {
            "best": save(core_context, 1, validation_metrics={"auc": 0.9}),
            "other": save(core_context, 2, validation_metrics={"auc": 0.7}),
            "latest": save(core_context, 3, validation_metrics={"auc": 0.8}),
        }
        checkpoint_dir = core_context.checkpoint.directory
        assert {c.uuid for c in TrialCheckpoints(checkpoint_dir).list()} == {written["best"], written["latest"]}
        if paused:
            core_context.preempt._watcher.request()
            assert core_context.preempt.should_preempt()
    assert {c.uuid for c in TrialCheckpoints(checkpoint_dir).list()} == {written[name] for name in kept}
    with ExperimentStore(own_store) as store:
        (experiment,) = store.experiments()
        assert experiment.state == (State.PAUSED if paused else State.COMPLETED)
        assert {c.uuid for c in store.checkpoints(experiment.id)} == {written[name] for name in kept}


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"distributed": "horovod"}, TypeError, "det.core.init(distributed=...) takes a det.core.DistributedContext"),
        ({"checkpoint_storage": 5}, TypeError, "det.core.init(checkpoint_storage=...) takes the path of a directory"),
        ({"preempt_mode": "ChiefOnly"}, ValueError, "det.core.init(preempt_mode=...) takes one of: PreemptMode."),
        ({"config": "const.yaml"}, TypeError, "det.core.init(config=...) takes the experiment config as a dict"),
        ({"config": [("name", "x")]}, TypeError, "Received: [('name', 'x')] (list)"),
    ],
)
def test_init_refuses_an_argument_of_the_wrong_kind_naming_it_before_recording(
    arguments, error, message, tmp_path, monkeypatch
):
    monkeypatch.delenv(_info.INFO_VARIABLE, raising=False)
    monkeypatch.setenv("DET_ESTIMATOR_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error) as raised:
        core.init(**arguments)
    assert message in str(raised.value)
    if (tmp_path / "store.sqlite").exists():
        with ExperimentStore(tmp_path / "store.sqlite") as store:
            assert store.experiments() == []


def test_init_refuses_checkpoint_storage_that_is_a_file_before_recording(tmp_path, monkeypatch):
    monkeypatch.delenv(_info.INFO_VARIABLE, raising=False)
    monkeypatch.setenv("DET_ESTIMATOR_STORE", str(tmp_path / "store.sqlite"))
    (tmp_path / "a-file").write_text("not a directory\n")
    with pytest.raises(ValueError, match=r"checkpoint_storage.host_path .*a-file is a file. Expected a directory"):
        core.init(checkpoint_storage=tmp_path / "a-file")
    assert not (tmp_path / "store.sqlite").exists()
