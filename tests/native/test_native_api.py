"""det.init(): the native API's modes and its errors."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator.store import ExperimentStore


def config(tmp_path, batches=3):
    return {
        "name": "native-linear",
        "hyperparameters": {"global_batch_size": 4, "learning_rate": 0.1},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": batches}},
        "scheduling_unit": 1,
        "min_validation_period": {"batches": 1},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        "reproducibility": {"experiment_seed": 3},
    }


def linear_run(context):
    """A one-weight linear model built with the context's wrappers, as a script would."""
    optimizer = context.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(context.get_hparam("learning_rate")))
    x = np.arange(16, dtype=np.float32)

    def model_fn(features, labels, mode):
        weight = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.zeros_initializer())
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"y": weight * features})
        loss = tf.reduce_mean(tf.square(weight * features - labels))
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn():
        dataset = context.wrap_dataset(tf.data.Dataset.from_tensor_slices((x / 16, 2 * x / 16)))
        return dataset.repeat().batch(context.get_per_slot_batch_size())

    return tf.estimator.Estimator(model_fn), tf.estimator.TrainSpec(input_fn), tf.estimator.EvalSpec(input_fn, steps=2)


def test_local_mode_trains_in_this_process_with_the_configs_hyperparameters(tmp_path):
    context = det.init(config(tmp_path), local=True)
    assert isinstance(context, det.EstimatorNativeContext)
    assert context.get_hparam("learning_rate") == 0.1 and context.get_per_slot_batch_size() == 4
    outcome = context.train_and_evaluate(*linear_run(context))
    assert (outcome.state, outcome.batches_trained) == ("COMPLETED", 3)
    assert [v["batches"] for v in outcome.validations] == [1, 2, 3]
    # The one checkpoint layout: <storage>/experiment-<id>-<tag>/trial-<id>/<uuid>, recorded in the store.
    checkpoint = Path(outcome.checkpoints[-1]["path"])
    assert checkpoint.parent.parent.parent == tmp_path / "checkpoints"
    with ExperimentStore() as store:
        assert store.checkpoint(checkpoint.name).path == str(checkpoint)
        assert store.experiment(outcome.experiment_id).state == "COMPLETED"
    with pytest.raises(RuntimeError, match=r"train_and_evaluate\(\) runs once per det.init\(\)"):
        context.train_and_evaluate(*linear_run(context))
    # Run again, a local run resumes from its latest checkpoint and trains on to the new length.
    again = det.init(config(tmp_path, batches=5), local=True)
    resumed = again.train_and_evaluate(*linear_run(again))
    assert resumed.batches_trained == 5 and [v["batches"] for v in resumed.validations] == [4, 5]


def test_test_mode_runs_one_batch_one_validation_step_and_one_checkpoint(tmp_path):
    context = det.init(config(tmp_path, batches=100), local=True, test=True)
    outcome = context.train_and_evaluate(*linear_run(context))
    assert outcome.batches_trained == 1 and len(outcome.validations) == 1 and len(outcome.checkpoints) == 1


def test_a_test_run_neither_resumes_an_earlier_run_nor_is_resumed_by_a_later_one(tmp_path):
    # Test mode checks the code as it is now, perhaps a model changed since the last run.
    real = det.init(config(tmp_path, batches=3), local=True)
    first = real.train_and_evaluate(*linear_run(real))
    check = det.init(config(tmp_path, batches=3), local=True, test=True)
    tested = check.train_and_evaluate(*linear_run(check))
    assert tested.batches_trained == 1 and len(tested.checkpoints) == 1
    assert tested.experiment_id != first.experiment_id
    check_again = det.init(config(tmp_path, batches=3), local=True, test=True)
    assert check_again.train_and_evaluate(*linear_run(check_again)).batches_trained == 1
    # The real run goes on from its own checkpoint, not from a test run's.
    again = det.init(config(tmp_path, batches=4), local=True)
    resumed = again.train_and_evaluate(*linear_run(again))
    assert resumed.experiment_id == first.experiment_id
    assert [v["batches"] for v in resumed.validations] == [4]


def test_context_dir_becomes_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "code").mkdir()
    det.init(config(tmp_path), local=True, context_dir=str(tmp_path / "code"))
    assert os.getcwd() == str(tmp_path / "code")


def test_files_the_command_names_from_here_are_the_same_files_from_the_context_dir(tmp_path, monkeypatch):
    from det_estimator.native._init import _command_to_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "exp.yaml").write_text("")
    command = ["code/train.py", "--config", "configs/exp.yaml", "--out=configs", "--epochs", "3", "-v", "missing.yaml"]

    assert _command_to_run(command, context_dir="code") == [
        "python3",
        str(tmp_path / "code" / "train.py"),
        "--config",
        str(tmp_path / "configs" / "exp.yaml"),
        f"--out={tmp_path / 'configs'}",
        "--epochs",
        "3",
        "-v",
        "missing.yaml",
    ]
    # Run where the code is, the command's paths mean the same there already.
    assert _command_to_run(command, context_dir=".")[2:4] == ["--config", "configs/exp.yaml"]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"master_url": "http://master:8080"}, ValueError, "det-estimator has no remote master"),
        ({"local": True, "context_dir": "/no/such/dir"}, ValueError, "not a directory"),
        ({"local": True, "config": "const.yaml"}, TypeError, r"takes a dict. Received: str"),
        ({"local": False, "command": []}, ValueError, "non-empty list of strings"),
        (
            {"local": False, "command": "train.py --epochs 3"},
            TypeError,
            r"det.init\(command=...\) takes the command line as a list of strings "
            r"\(e.g. \['train.py', '--epochs', '3'\]\)",
        ),
        ({"local": True, "context_dir": 5}, TypeError, r"det.init\(context_dir=...\) takes the path of a directory"),
        ({"local": "yes"}, TypeError, r"det.init\(local=...\) takes True or False. Received: 'yes' \(str\)"),
        ({"local": True, "test": "no"}, TypeError, r"det.init\(test=...\) takes True or False. Received: 'no'"),
    ],
)
def test_bad_arguments_are_clear_errors(tmp_path, arguments, error, message):
    arguments.setdefault("config", config(tmp_path))
    with pytest.raises(error, match=message):
        det.init(**arguments)


def test_launching_from_a_notebook_or_python_c_needs_a_command(tmp_path):
    code = f"import det_estimator as det\ndet.init({config(tmp_path)!r}, local=False)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "from a notebook or `python -c` needs `command`" in result.stderr


def test_a_bad_config_is_rejected_before_anything_runs(tmp_path):
    broken = config(tmp_path)
    broken["searcher"]["max_length"] = {"minutes": 3}
    with pytest.raises(ValueError, match="searcher.max_length"):
        det.init(broken, local=True)


def test_serving_functions_set_on_the_context_are_exported_as_the_reference_does(tmp_path):
    context = det.experimental.estimator.init(config(tmp_path, batches=1), local=True)

    def raw_features():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        return tf.estimator.export.TensorServingInputReceiver(x, x)

    context.serving_input_receiver_fns = {"raw": raw_features}
    outcome = context.train_and_evaluate(*linear_run(context))
    checkpoint = Path(outcome.checkpoints[-1]["path"])
    assert (checkpoint / "raw" / "saved_model.pb").is_file()
    loaded = det.estimator.load_estimator_from_checkpoint_path(str(checkpoint))
    assert "serving_default" in loaded.signatures


@pytest.mark.parametrize(
    ("on_context", "passed", "message"),
    [
        ([print], None, r"context.serving_input_receiver_fns must be a dict of name to serving_input_receiver_fn"),
        ({}, [print], r"train_and_evaluate\(serving_input_receiver_fns=...\) takes a dict of name to"),
    ],
)
def test_serving_functions_that_are_not_a_dict_are_a_clear_error(tmp_path, on_context, passed, message):
    context = det.init(config(tmp_path, batches=1), local=True)
    context.serving_input_receiver_fns = on_context
    with pytest.raises(TypeError, match=message):
        context.train_and_evaluate(*linear_run(context), serving_input_receiver_fns=passed)


def test_checkpoint_storage_that_is_a_file_is_refused_before_recording(tmp_path, own_store):
    (tmp_path / "a-file").write_text("not a directory\n")
    broken = config(tmp_path)
    broken["checkpoint_storage"]["host_path"] = str(tmp_path / "a-file")
    with pytest.raises(ValueError, match=r"checkpoint_storage.host_path .*a-file is a file. Expected a directory"):
        det.init(broken, local=True)
    assert not own_store.exists()
