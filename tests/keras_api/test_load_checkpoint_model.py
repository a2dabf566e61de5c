"""context.load_checkpoint_model: the trial's last checkpoint, as the proposal has it; another type's, refused."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from det_estimator import core
from det_estimator.keras._api._context import KerasContext, Optimizations
from det_estimator.keras._engine._format import CheckpointLoadError
from det_estimator.store import ExperimentStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from memory_store import MemoryStore  # noqa: E402


def write_checkpoint(path, kernel: float) -> None:
    """A checkpoint as context.fit writes it: the architecture and the weights of y = kernel * x."""
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, use_bias=False, input_shape=(1,))])
    model.layers[0].kernel.assign([[kernel]])
    path.mkdir()
    (path / "model_architecture.json").write_text(model.to_json())
    tf.train.Checkpoint(model=model).write(str(path / "model_checkpoint"))


def test_a_trial_s_last_checkpoint_is_loaded_unless_its_best_is_asked_for(tmp_path):
    # The context looks checkpoints up through the client it is handed: an in-memory store
    # here, whose path no SQLite client can open.
    store = MemoryStore(tmp_path / "files")
    config = {"searcher": {"name": "single", "metric": "val_loss", "smaller_is_better": True}}
    experiment_id = store.create_experiment("fit", config, str(tmp_path), "python3 train.py", 1, False)
    trial_id = store.create_trial(experiment_id, {}, 0, tmp_path / "checkpoints")
    # The first checkpoint validated best; the last is the second.
    for batches, kernel, loss in ((10, 1.0, 0.1), (20, 2.0, 0.5)):
        path = tmp_path / f"checkpoint-{batches}"
        write_checkpoint(path, kernel)
        metadata = {"validation_metrics": {"val_loss": loss}}
        store.record_checkpoint(trial_id, f"uuid-{batches}", batches, str(path), 0, metadata)
    context = KerasContext(core.DummyDistributedContext(), None, {}, 0, Optimizations(), store, "BATCH_INFERENCE")

    def kernel_of(model) -> float:
        return float(np.squeeze(model.layers[0].kernel.numpy()))

    assert kernel_of(context.load_checkpoint_model(trial_id=trial_id)) == 2.0
    assert kernel_of(context.load_checkpoint_model(trial_id=trial_id, best=True)) == 1.0
    assert kernel_of(context.load_checkpoint_model(checkpoint_uuid="uuid-10")) == 1.0


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"model/checkpoint": 'model_checkpoint_path: "model.ckpt-1"\n', "raw/saved_model.pb": ""},
            r"not written by a TFKerasTrial, context\.fit\(\) or det\.keras\.DeterminedCallback, "
            r"but by an EstimatorTrial: "
            r"load it with det\.estimator\.load_estimator_from_checkpoint_path\('.*', serving_name=\.\.\.\)\.",
        ),
        (
            {"model/state.index": "", "saved_model/saved_model.pb": ""},
            r"holds the weights but not the architecture of its model .*: pass model=<a model built as in training>\.",
        ),
        (
            {"weights.bin": ""},
            r"not written by a TFKerasTrial, context\.fit\(\) or det\.keras\.DeterminedCallback, but by something",
        ),
        (None, r"is not there: its directory does not exist\."),
    ],
)
def test_a_checkpoint_of_another_trial_type_names_what_loads_it(tmp_path, files, message):
    path = tmp_path / "checkpoint"
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    store_path = tmp_path / "store.sqlite"
    with ExperimentStore(store_path) as store:
        config = {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True}}
        experiment_id = store.create_experiment("trial", config, str(tmp_path), "model_def:Trial", 1, False)
        trial_id = store.create_trial(experiment_id, {}, 0, tmp_path / "checkpoints")
        store.record_checkpoint(trial_id, "uuid", 1, str(path), 0, {})
    context = KerasContext(
        core.DummyDistributedContext(),
        None,
        {},
        0,
        Optimizations(),
        ExperimentStore(store_path),
        "BATCH_INFERENCE",
        owns_store=True,
    )
    with pytest.raises(CheckpointLoadError, match=message):
        context.load_checkpoint_model(checkpoint_uuid="uuid")
