"""A config without searcher.max_length, as the reference's last release allows: the script decides its length."""

import textwrap

import yaml

OWN_LENGTH = textwrap.dedent(
    """
    import det_estimator as det

    with det.core.init() as core:
        for batches in (2, 4):
            core.train.report_training_metrics(batches, {"loss": 1.0 / batches})
            core.train.report_validation_metrics(batches, {"loss": 1.0 / batches})
    """
)
OPERATIONS = textwrap.dedent(
    """
    import det_estimator as det

    with det.core.init() as core:
        for op in core.searcher.operations():
            op.report_completed(1.0)
    """
)


def write_experiment(directory, script: str, entrypoint: str = "python3 train.py"):
    directory.mkdir()
    (directory / "train.py").write_text(script)
    config = {
        "name": "own length",
        "entrypoint": entrypoint,
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints"},
        "max_restarts": 0,
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_script_without_max_length_trains_to_its_own_length_and_is_ranked_by_its_last_validation(det, tmp_path):
    code = tmp_path / "code"
    det.ok("experiment", "create", write_experiment(code, OWN_LENGTH), code)
    experiment = det.experiment(1)
    assert experiment["state"] == "COMPLETED" and experiment["batches_trained"] == 4
    (trial,) = det.json("experiment", "describe", 1)["trials"]
    assert [(v["batches"], v["metrics"]["loss"]) for v in trial["validations"]] == [(2, 0.5), (4, 0.25)]
    assert trial["max_batches"] is None  # no length of the config's to show the batches against
    (row,) = det.ok("experiment", "list").stdout.splitlines()[1:]
    assert " 4 " in row and "/" not in row.split("COMPLETED")[1].split()[1]


def test_a_script_without_max_length_that_asks_for_operations_is_told_why_there_are_none(det, tmp_path):
    code = tmp_path / "code"
    result = det("experiment", "create", write_experiment(code, OPERATIONS), code)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "The experiment config has no searcher.max_length, so the searcher gives no operation" in result.stderr


def test_a_trial_class_without_max_length_is_refused_before_anything_is_recorded(det, tmp_path):
    code = tmp_path / "code"
    result = det("experiment", "create", write_experiment(code, OWN_LENGTH, "model_def:MyTrial"), code)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "missing required key `searcher.max_length`: a trial class (entrypoint 'model_def:MyTrial' (str))" in (
        result.stderr
    )
    assert not det.store.exists()  # nothing recorded: not even a store
