import dataclasses
import json
import os
import warnings

import pytest

from det_estimator.config import (
    ConfigError,
    ConstHyperparameter,
    IntHyperparameter,
    Length,
    LengthUnit,
    load_experiment_config,
)

MINIMAL = {
    "entrypoint": "model_def:MyTrial",
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {"name": "single", "metric": "auc", "max_length": {"batches": 100}},
}

FULL = {
    "entrypoint": "ctr.models.deep:WideAndDeepTrial",
    "name": "ctr-wide-deep",
    "description": "Wide and deep model on the click logs",
    "labels": ["ctr", "baseline"],
    "data": {"train_files": ["a.tfrecord", "b.tfrecord"], "options": {"compression": "GZIP", "shards": 4}},
    "hyperparameters": {
        "global_batch_size": {"type": "int", "minval": 64, "maxval": 256, "count": 3},
        "learning_rate": {"type": "log", "minval": -4, "maxval": -1, "base": 10, "count": 4},
        "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
        "activation": {"type": "categorical", "vals": ["relu", "gelu"]},
        "hidden_units": [256, 128],
        "optimizer": {"name": "adam", "beta_1": {"type": "const", "val": 0.9}},
    },
    "searcher": {
        "name": "single",
        "metric": "auc",
        "smaller_is_better": False,
        "max_length": {"epochs": 3},
    },
    "records_per_epoch": 100_000,
    "scheduling_unit": 50,
    "min_validation_period": {"records": 20_000},
    "min_checkpoint_period": {"batches": 500},
    "perform_initial_validation": True,
    "checkpoint_policy": "all",
    "checkpoint_storage": {
        "type": "shared_fs",
        "host_path": "/mnt/checkpoints",
        "storage_path": "ctr/wide-deep",
        "save_trial_latest": 2,
        "save_trial_best": 3,
        "save_experiment_best": 1,
    },
    "resources": {"slots_per_trial": 4},
    "optimizations": {
        "aggregation_frequency": 2,
        "average_aggregated_gradients": False,
        "gradient_compression": True,
        "average_training_metrics": False,
    },
    "reproducibility": {"experiment_seed": 1234},
}


def test_minimal_config_gets_every_default(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    # The seed defaults to the time of loading, in milliseconds modulo 2**31.
    monkeypatch.setattr("time.time_ns", lambda: (2**31 + 5) * 1_000_000 + 999)
    config = load_experiment_config(MINIMAL)
    assert config.to_dict() == {
        "entrypoint": "model_def:MyTrial",
        "name": "",
        "description": "",
        "labels": [],
        "data": {},
        "hyperparameters": {"global_batch_size": {"type": "const", "val": 32}},
        "searcher": {"name": "single", "metric": "auc", "smaller_is_better": True, "max_length": {"batches": 100}},
        "records_per_epoch": 0,
        "scheduling_unit": 100,
        "min_validation_period": None,
        "min_checkpoint_period": None,
        "perform_initial_validation": False,
        "checkpoint_policy": "best",
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": os.path.join(str(tmp_path), ".det-estimator", "checkpoints"),
            "storage_path": "",
            "save_trial_latest": 1,
            "save_trial_best": 1,
            "save_experiment_best": 0,
        },
        "resources": {"slots_per_trial": 1},
        "optimizations": {
            "aggregation_frequency": 1,
            "average_aggregated_gradients": True,
            "gradient_compression": False,
            "average_training_metrics": True,
        },
        "reproducibility": {"experiment_seed": 5},
        "max_restarts": 5,
        "hang_timeout_seconds": 1800,
        "environment": {"environment_variables": {"cpu": [], "cuda": [], "rocm": []}},
    }


def test_minimal_config_fields():
    config = load_experiment_config(MINIMAL)
    assert (config.entrypoint_module, config.entrypoint_class) == ("model_def", "MyTrial")
    assert config.entrypoint == "model_def:MyTrial"
    assert config.searcher.max_length == Length(LengthUnit.BATCHES, 100)
    assert config.hyperparameters["global_batch_size"] == ConstHyperparameter(32)
    assert 0 <= config.reproducibility.experiment_seed < 2**31


def test_null_means_default():
    config = load_experiment_config({**MINIMAL, "scheduling_unit": None, "labels": None, "resources": None})
    assert config.scheduling_unit == 100
    assert config.labels == ()
    assert config.resources.slots_per_trial == 1


def test_full_config_round_trips():
    config = load_experiment_config(FULL)
    as_dict = config.to_dict()
    assert load_experiment_config(as_dict) == config
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["hyperparameters"]["global_batch_size"] == {"type": "int", "minval": 64, "maxval": 256, "count": 3}
    assert as_dict["hyperparameters"]["hidden_units"] == {"type": "const", "val": [256, 128]}
    assert as_dict["data"] == FULL["data"]
    for section in ("searcher", "checkpoint_storage", "resources", "optimizations", "reproducibility"):
        assert as_dict[section] == FULL[section]
    for key in ("records_per_epoch", "min_validation_period", "min_checkpoint_period", "checkpoint_policy"):
        assert as_dict[key] == FULL[key]


def test_full_config_fields():
    config = load_experiment_config(FULL)
    assert config.entrypoint_module == "ctr.models.deep"
    assert config.hyperparameters["global_batch_size"] == IntHyperparameter(64, 256, 3)
    assert config.hyperparameters["optimizer"]["beta_1"] == ConstHyperparameter(0.9)
    assert config.min_validation_period == Length(LengthUnit.RECORDS, 20_000)
    assert config.checkpoint_storage.checkpoint_directory == os.path.join("/mnt/checkpoints", "ctr", "wide-deep")
    assert config.reproducibility.experiment_seed == 1234


def test_checkpoint_storage_expands_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    storage = {"type": "shared_fs", "host_path": "~/ckpt"}
    config = load_experiment_config({**MINIMAL, "checkpoint_storage": storage})
    assert config.checkpoint_storage.host_path == os.path.join(str(tmp_path), "ckpt")
    assert config.checkpoint_storage.checkpoint_directory == os.path.join(str(tmp_path), "ckpt")


def test_loads_a_yaml_file(tmp_path):
    path = tmp_path / "const.yaml"
    path.write_text(
        "entrypoint: model_def:MyTrial\n"
        "hyperparameters:\n"
        "  global_batch_size: 64\n"
        "  lr: {type: log, minval: -3, maxval: -1, base: 10}\n"
        "searcher:\n"
        "  name: single\n"
        "  metric: val_loss\n"
        "  max_length:\n"
        "    epochs: 2\n"
        "records_per_epoch: 6400\n",
        encoding="utf-8",
    )
    for source in (path, str(path)):
        config = load_experiment_config(source)
        assert config.searcher.max_length.to_batches(64, config.records_per_epoch) == 200
        assert config.searcher.metric == "val_loss"


def test_config_is_immutable():
    config = load_experiment_config(FULL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.scheduling_unit = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.searcher.metric = "loss"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hyperparameters["global_batch_size"].minval = 1
    with pytest.raises(TypeError):
        config.data["extra"] = 1
    with pytest.raises(TypeError):
        config.data["options"]["shards"] = 8
    with pytest.raises(TypeError):
        config.hyperparameters["dropout"] = 0.1
    assert isinstance(config.labels, tuple)


def test_data_dict_is_a_fresh_plain_copy():
    config = load_experiment_config(FULL)
    data = config.data_dict()
    assert data == FULL["data"]
    assert isinstance(data["train_files"], list)
    data["options"]["shards"] = 8
    assert config.data_dict()["options"]["shards"] == 4


def test_the_source_dict_is_not_kept():
    raw = {**MINIMAL, "data": {"files": ["a"]}}
    config = load_experiment_config(raw)
    raw["data"]["files"].append("b")
    assert config.data_dict() == {"files": ["a"]}


def test_per_slot_batch_size_divides_exactly_without_warning():
    config = load_experiment_config({**MINIMAL, "resources": {"slots_per_trial": 4}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.per_slot_batch_size(32) == 8


def test_per_slot_batch_size_rounds_down_with_a_warning():
    config = load_experiment_config({**MINIMAL, "resources": {"slots_per_trial": 3}})
    with pytest.warns(UserWarning, match=r"global batch size 32 .* rounded down to 30 \(10 per slot\)"):
        assert config.per_slot_batch_size(32) == 10


def test_per_slot_batch_size_rejects_fewer_records_than_slots():
    config = load_experiment_config({**MINIMAL, "resources": {"slots_per_trial": 4}})
    with pytest.raises(ConfigError, match=r"must be at least `resources.slots_per_trial` \(4\)"):
        config.per_slot_batch_size(3)
    with pytest.raises(ConfigError, match="must be a positive integer"):
        config.per_slot_batch_size(0)


def test_source_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="path to a YAML file or a dict"):
        load_experiment_config(42)


@pytest.mark.parametrize(
    "entrypoint",
    [
        {"entrypoint": "python3 train.py --epochs 3"},
        {"entrypoint": ["python3", "train.py", "--epochs", "3"]},
        {"entrypoint_script": "python3 train.py --epochs 3"},
    ],
)
def test_a_command_entrypoint_runs_a_script_which_may_go_without_a_global_batch_size(entrypoint):
    config = load_experiment_config(
        {**entrypoint, "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 5}}}
    )
    assert config.is_script and config.entrypoint_command == ("python3", "train.py", "--epochs", "3")
    assert config.entrypoint == "python3 train.py --epochs 3"
    assert (config.entrypoint_module, config.entrypoint_class) == ("", "")
    assert config.sample_hyperparameters(1) == {}
    again = load_experiment_config(config.to_dict())
    assert again == config and again.to_dict()["entrypoint"] == ["python3", "train.py", "--epochs", "3"]


def test_a_trial_class_entrypoint_is_not_a_script():
    config = load_experiment_config(
        {
            "entrypoint": "model_def:MyTrial",
            "hyperparameters": {"global_batch_size": 4},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 5}},
        }
    )
    assert not config.is_script and config.entrypoint_command == ()


def test_with_overrides_replaces_the_keys_given_and_reads_back_as_loading_the_edited_config_would():
    config = load_experiment_config(FULL)

    changed = config.with_overrides(slots=2, seed=11, max_length=Length(LengthUnit.BATCHES, 40), records_per_epoch=64)

    edited = config.to_dict()
    edited["resources"]["slots_per_trial"] = 2
    edited["reproducibility"]["experiment_seed"] = 11
    edited["searcher"]["max_length"] = {"batches": 40}
    edited["records_per_epoch"] = 64
    assert changed == load_experiment_config(edited)
    assert config == load_experiment_config(config.to_dict())  # the original is unchanged


def test_with_overrides_test_is_one_trial_of_one_batch_with_the_same_metric_and_seed():
    search = {**FULL, "searcher": {**FULL["searcher"], "name": "random", "max_trials": 8}}
    config = load_experiment_config(search)

    tested = config.with_overrides(test=True)

    assert tested.searcher.to_dict() == {
        "name": "single",
        "metric": "auc",
        "smaller_is_better": False,
        "max_length": {"batches": 1},
    }
    assert tested.reproducibility == config.reproducibility
    assert tested.hyperparameters == config.hyperparameters


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"slots": 0}, "`resources.slots_per_trial` must be a positive integer. Received: 0"),
        ({"slots": True}, "`resources.slots_per_trial` must be a positive integer. Received: True"),
        ({"slots": 64}, "`hyperparameters.global_batch_size` must be at least `resources.slots_per_trial` (64)"),
        ({"seed": 2**31}, "`reproducibility.experiment_seed` must be an integer from 0 to 2147483647"),
        ({"records_per_epoch": -1}, "`records_per_epoch` must be a non-negative integer"),
        ({"max_length": Length(LengthUnit.EPOCHS, 2)}, "`searcher.max_length` is given in epochs"),
    ],
)
def test_with_overrides_refuses_what_loading_refuses_naming_the_key(overrides, message):
    config = load_experiment_config({**MINIMAL, "hyperparameters": {"global_batch_size": 32}})

    with pytest.raises(ConfigError) as raised:
        config.with_overrides(**overrides)

    assert message in str(raised.value)
