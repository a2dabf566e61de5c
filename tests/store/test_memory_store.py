"""The in-memory store the core and lifecycle unit tests use reads back what the real store does."""

import dataclasses
import sys
from pathlib import Path

import pytest

from det_estimator.store import ExperimentStore, MetricKind, State, UnknownIdError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from memory_store import MemoryStore  # noqa: E402

# What differs between two stores by nature: times, the launcher's host, the random tag in
# checkpoint directories, and where each keeps its files.
_UNCOMPARED = {"created_at", "ended_at", "recorded_at", "started_at", "launcher_host", "checkpoint_dir", "log_path"}


def plain(value):
    """Records as dicts without what two stores may not share."""
    if dataclasses.is_dataclass(value):
        fields = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        if "pause_requested_at" in fields:  # a time: whether there is one
            fields["pause_requested_at"] = fields["pause_requested_at"] is not None
        return {name: plain(item) for name, item in fields.items() if name not in _UNCOMPARED}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, set):
        return sorted(value)
    return value


def exercise(store, tmp_path):
    """The operations the Core API and the run lifecycle use, in the order a run uses them; returns what they read."""
    config = {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True}, "data": {}}
    experiment_id = store.create_experiment("e", config, "/context", "python3 train.py", 2, False, ["python3", "x"])
    store.claim(experiment_id)
    first = store.create_trial(experiment_id, {"lr": 0.1}, 7, tmp_path / "checkpoints")
    second = store.create_trial(experiment_id, {"lr": 0.2}, 8, tmp_path / "checkpoints")
    killed = store.start_run(first)
    store.set_progress(first, 5, 40)
    for batches, loss in ((10, 0.5), (20, 0.25), (30, 0.125)):
        store.record_metrics(first, MetricKind.TRAINING, batches, {"loss": loss}, killed)
        store.record_metrics(first, MetricKind.VALIDATION, batches, {"loss": loss, "note": "x"}, killed)
    store.record_checkpoint(first, "c10", 10, "/c10", 100, {"validation_metrics": {"loss": 0.5}}, killed)
    store.record_checkpoint(first, "c20", 20, "/c20", 100, {"steps_completed": 20}, killed)
    store.record_checkpoint_validation("c20", {"loss": 0.25}, size_bytes=120)
    store.record_checkpoint(second, "d10", 10, "/d10", 100, {"validation_metrics": {"loss": float("nan")}})
    store.record_run_error(killed, {"rank": 0, "type": "PeerGoneError", "message": "lost", "consequence": True})
    store.record_run_error(killed, {"rank": 1, "type": "ValueError", "message": "the cause"})
    store.record_run_error(killed, {"rank": 0, "type": "Later", "message": "a consequence of it"})
    store.end_run(killed, State.ERROR, 1)
    restarted = store.start_run(first, start_batches=20)  # the batches after 20 are trained again
    store.record_metrics(first, MetricKind.VALIDATION, 30, {"loss": 0.375}, restarted)
    store.acknowledge_preemption(restarted)
    store.report_search_metric(first, 30, 0.375)
    store.request_pause(experiment_id)
    store.mark_checkpoints_deleted(["c10"])
    store.set_trial_state(second, State.COMPLETED)
    store.set_state(experiment_id, State.PAUSED)
    job = store.create_job("j", {"data": {}}, "/context", ["python3", "j.py"], 1)
    store.end_job(job, State.ERROR, 3, {"message": "failed"})
    with pytest.raises(UnknownIdError):
        store.checkpoint("none")
    return {
        "experiment": plain(store.experiment(experiment_id)),
        "trials": plain(store.trials(experiment_id)),
        "runs": plain([store.trial_run(killed), store.trial_run(restarted)]),
        "training": plain(store.metrics(first, MetricKind.TRAINING)),
        "validation": plain(store.metrics(first, MetricKind.VALIDATION)),
        "of the killed run": plain(store.metrics(first, MetricKind.VALIDATION, run_id=killed)),
        "checkpoints": plain(store.checkpoints(experiment_id)),
        "every checkpoint": plain(store.checkpoints(experiment_id, include_deleted=True, trial_id=first)),
        "c20": plain(store.checkpoint("c20")),
        "best checkpoints": plain(store.best_checkpoints(experiment_id, "loss", True, 2)),
        "best validation": plain(store.best_validation(experiment_id)),
        "job": plain(store.job(job)),
        "tensorboard": Path(store.trial(first).tensorboard_dir).relative_to(store.files_dir).parts[:2],
    }


def test_the_memory_store_reads_back_what_the_sqlite_store_does(tmp_path):
    with ExperimentStore(tmp_path / "sqlite" / "store.sqlite") as sqlite:
        expected = exercise(sqlite, tmp_path / "sqlite")
    memory = MemoryStore(tmp_path / "memory")

    read = exercise(memory, tmp_path / "memory")

    for key, value in expected.items():
        assert read[key] == value, key
    assert read["runs"][0]["error"]["message"] == "the cause"  # not what the store cares about, but checked
