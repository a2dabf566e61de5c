"""Forms of the reference's last release in a ported config: each accepted as what it means, or refused saying why."""

import os
import warnings

import pytest

from det_estimator.config import ConfigError, ReferenceFormMappedWarning, _environment, load_experiment_config
from det_estimator.config._checkpoint_storage import DEFAULT_HOST_PATH

BASE = {
    "entrypoint": "model_def:MyTrial",
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    "reproducibility": {"experiment_seed": 7},
}


def with_searcher(**searcher):
    return {**BASE, "searcher": {"name": "single", "metric": "loss", **searcher}}


@pytest.mark.parametrize("unit", ["batches", "records", "epochs"])
def test_max_time_in_a_time_metric_of_a_unit_is_the_max_length_it_means(unit):
    asha = {"name": "adaptive_asha", "metric": "loss", "max_trials": 64}
    reference = load_experiment_config(
        {**BASE, "records_per_epoch": 640, "searcher": {**asha, "max_time": 256, "time_metric": unit}}
    )
    ours = load_experiment_config({**BASE, "records_per_epoch": 640, "searcher": {**asha, "max_length": {unit: 256}}})
    assert reference.searcher == ours.searcher
    assert reference.searcher.asha_brackets() == ours.searcher.asha_brackets()
    assert reference.to_dict() == ours.to_dict()


def test_a_time_metric_naming_the_unit_of_max_length_is_accepted():
    config = load_experiment_config(with_searcher(max_length={"batches": 100}, time_metric="batches"))
    assert config.searcher == load_experiment_config(BASE).searcher


@pytest.mark.parametrize(
    ("searcher", "message"),
    [
        (
            {"max_time": 10, "time_metric": "steps_completed"},
            "`searcher.time_metric` must be one of batches, records, epochs: det-estimator measures a trial's "
            "length in those, and not by a metric the trial reports. Give the length as `max_length`",
        ),
        ({"max_time": 10}, "`searcher.max_time` needs `searcher.time_metric`, the unit it counts in"),
        (
            {"max_length": {"batches": 10}, "time_metric": "epochs"},
            "`searcher.time_metric` (epochs) is not the unit of `searcher.max_length`",
        ),
        (
            {"max_length": {"batches": 10}, "max_time": 10, "time_metric": "batches"},
            "give either `searcher.max_length` or `searcher.max_time` with `searcher.time_metric`, not both",
        ),
        ({"max_time": 0, "time_metric": "batches"}, "`searcher.max_time` must be a positive integer"),
    ],
)
def test_a_time_metric_that_cannot_be_honoured_is_refused_saying_what_to_write(searcher, message):
    with pytest.raises(ConfigError) as refused:
        load_experiment_config(with_searcher(**searcher))
    assert message in str(refused.value)


def test_a_checkpoint_storage_of_retention_keys_only_gets_the_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    retention = {"save_trial_best": 3, "save_trial_latest": 2, "save_experiment_best": 1}
    storage = load_experiment_config({**BASE, "checkpoint_storage": retention}).checkpoint_storage
    default = load_experiment_config(BASE).checkpoint_storage
    assert storage.host_path == default.host_path == os.path.expanduser(DEFAULT_HOST_PATH)
    assert storage.checkpoint_directory == default.checkpoint_directory
    assert (storage.save_trial_best, storage.save_trial_latest, storage.save_experiment_best) == (3, 2, 1)


def test_a_checkpoint_storage_with_a_location_still_needs_its_type():
    with pytest.raises(ConfigError, match="missing required key `checkpoint_storage.type`"):
        load_experiment_config({**BASE, "checkpoint_storage": {"host_path": "/ckpt", "save_trial_best": 2}})


@pytest.mark.parametrize("engine", ["tensorflow", "horovod"])
@pytest.mark.parametrize("separator", [["--"], []])
def test_the_reference_launchers_run_as_ours_with_one_note(engine, separator, monkeypatch):
    monkeypatch.setattr(_environment, "_WARNED", set())  # once per process: as if this process were new
    words = ["python3", "-m", f"determined.launch.{engine}", *separator, "python3", "train.py", "--lr", "0.1"]
    raw = {**BASE, "entrypoint": " ".join(words)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_experiment_config(raw)
        again = load_experiment_config(raw)  # a command loads its config more than once
    expected = ("python3", "-m", f"det_estimator.launch.{engine}", "--", "python3", "train.py", "--lr", "0.1")
    assert config.entrypoint_command == again.entrypoint_command == expected
    notes = [warning for warning in caught if issubclass(warning.category, ReferenceFormMappedWarning)]
    assert len(notes) == 1
    assert f"runs `determined.launch.{engine}`, the reference system's launcher" in str(notes[0].message)
    assert f"`python3 -m det_estimator.launch.{engine} -- python3 train.py --lr 0.1` instead" in str(notes[0].message)
    without_entrypoint = {key: value for key, value in BASE.items() if key != "entrypoint"}
    script = load_experiment_config({**without_entrypoint, "entrypoint_script": words})
    assert script.entrypoint_command == expected


@pytest.mark.parametrize("options", [["--autohorovod", "--"], ["--trial", "model_def:MyTrial"], ["--"], []])
def test_a_reference_launcher_with_options_of_its_own_or_no_command_is_refused_at_once(options):
    entrypoint = ["python3", "-m", "determined.launch.horovod", *options]
    with pytest.raises(ConfigError) as refused:
        load_experiment_config({**BASE, "entrypoint": entrypoint})
    assert (
        "`entrypoint` must be `python3 -m determined.launch.horovod -- <command>` (det-estimator runs the command "
        "as `python3 -m det_estimator.launch.horovod -- <command>`, which takes none of determined.launch.horovod's "
        "options)"
    ) in str(refused.value)
