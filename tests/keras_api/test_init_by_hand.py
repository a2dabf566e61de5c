"""A script calling det.keras.init() with no experiment runs as plain Keras would, and is recorded in a new store."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from .conftest import WORKERS


def run(*args: str, store, cwd) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(store))
    command = [sys.executable, str(WORKERS / "by_hand.py"), *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, cwd=cwd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


# Under pytest-xdist, the tests of the runs below on one test process, which runs them once.
BY_HAND = pytest.mark.xdist_group("keras_api_by_hand")


@pytest.fixture(scope="session")
def by_hand(tmp_path_factory):
    """The script run as plain Keras, then with the API into a store not there yet: (directory, plain, with_api)."""
    directory = tmp_path_factory.mktemp("by-hand")
    plain = run("--plain", store=directory / "unused.sqlite", cwd=directory)
    # fit(epochs=3, batch_size=16) on 160 records: 10 batches an epoch; its checkpoints go to ./checkpoints.
    with_api = run(store=directory / "not" / "there" / "yet" / "store.sqlite", cwd=directory)
    return directory, plain, with_api


@BY_HAND
def test_the_script_by_hand_trains_as_plain_keras_and_creates_the_store(by_hand, det):
    tmp_path, plain, with_api = by_hand
    store = tmp_path / "not" / "there" / "yet" / "store.sqlite"

    # epochs and initial_epoch are honoured by hand, the seed is init()'s default, the rest is Keras'.
    assert with_api["epoch"] == plain["epoch"] == [1, 2]
    assert sorted(with_api["history"]) == sorted(plain["history"]) == ["loss", "mae", "val_loss", "val_mae"]
    for name, values in plain["history"].items():
        assert with_api["history"][name] == pytest.approx(values, rel=1e-6), name
    for mine, theirs in zip(with_api["weights"], plain["weights"]):
        np.testing.assert_allclose(np.array(mine), np.array(theirs), rtol=1e-6, atol=1e-7)

    assert store.is_file()
    (experiment,) = json.loads(det(store, "experiment", "list", "--json").stdout)
    assert (experiment["name"], experiment["state"], experiment["slots"]) == ("by_hand", "COMPLETED", 1)
    described = json.loads(det(store, "experiment", "describe", experiment["id"], "--json").stdout)
    validations = described["trials"][0]["validations"]
    assert [v["metrics"]["loss"] for v in validations] == pytest.approx(plain["history"]["val_loss"], rel=1e-6)
    assert described["checkpoints"], "the run by hand keeps a checkpoint"
    assert all(checkpoint["path"].startswith(str(tmp_path / "checkpoints")) for checkpoint in described["checkpoints"])


@BY_HAND
def test_the_run_by_hand_records_the_epochs_it_trains_as_its_length(by_hand, det):
    # `experiment resume` of a run paused by Ctrl-C runs the script as a trial, which trains
    # the recorded searcher length: the epochs fit was given, not one batch (no config).
    store = by_hand[0] / "not" / "there" / "yet" / "store.sqlite"
    described = json.loads(det(store, "experiment", "describe", 1, "--json").stdout)
    assert described["config"]["searcher"]["max_length"] == {"epochs": 3}
    assert described["config"]["records_per_epoch"] == 160


def test_a_run_by_hand_paused_by_ctrl_c_ends_inside_fit(tmp_path, det):
    # The code after fit is for a finished training, as in a launched trial: here it would
    # print the History of a training half done as its result.
    store = tmp_path / "store.sqlite"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(store))
    command = [sys.executable, str(WORKERS / "by_hand.py"), "--pause-at=5"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "RESULT " not in result.stdout
    (experiment,) = json.loads(det(store, "experiment", "list", "--json").stdout)
    assert experiment["state"] == "PAUSED" and 5 <= experiment["batches_trained"] < 20


def test_a_run_by_hand_paused_mid_epoch_and_resumed_ends_as_an_uninterrupted_one(tmp_path, det):
    # The script has dropout: the resumed trial must go on with the masks the paused run
    # would have drawn, which a checkpoint holds only when the run by hand drew them from
    # generators. Its weights come from the checkpoint, its Python and NumPy states too.
    uninterrupted = tmp_path / "uninterrupted.sqlite"
    run("--unshuffled", store=uninterrupted, cwd=tmp_path)
    store = tmp_path / "store.sqlite"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(store), BY_HAND_PAUSE_AT="5")
    paused = subprocess.run(
        [sys.executable, str(WORKERS / "by_hand.py"), "--unshuffled"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        cwd=tmp_path,
    )
    assert paused.returncode == 0, paused.stdout[-3000:] + paused.stderr[-3000:]
    (experiment,) = json.loads(det(store, "experiment", "list", "--json").stdout)
    assert experiment["state"] == "PAUSED" and 0 < experiment["batches_trained"] < 20  # before the end

    det(store, "experiment", "resume", experiment["id"])

    def validations(store_path):
        described = json.loads(det(store_path, "experiment", "describe", 1, "--json").stdout)
        assert described["state"] == "COMPLETED"
        return [(v["batches"], v["metrics"]["loss"]) for v in described["trials"][0]["validations"]]

    expected = validations(uninterrupted)
    assert [batches for batches, _ in validations(store)] == [batches for batches, _ in expected] == [10, 20]
    assert [loss for _, loss in validations(store)] == pytest.approx([loss for _, loss in expected], rel=1e-6)


def test_a_run_by_hand_without_a_config_names_the_fix_for_a_hyperparameter_it_reads(tmp_path):
    # The proposal's script reads hparams["dropout"]; by hand, its values come from init(config=...).
    script = "import det_estimator as det\ncontext = det.keras.init()\ncontext.training.hparams['dropout']\n"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(tmp_path / "store.sqlite"))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path
    )
    assert result.returncode != 0
    assert "UndefinedHyperparameterError: Hyperparameter 'dropout' is not defined: this run by hand has no" in (
        result.stderr
    )
    assert "det.keras.init(config='const.yaml')" in result.stderr


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"seed": "7"},
            TypeError,
            "det.keras.init(seed=...) takes an integer from 0 to 2**31 - 1, or None. Received: '7'",
        ),
        ({"seed": 1.5}, TypeError, "det.keras.init(seed=...) takes an integer from 0 to 2**31 - 1"),
        ({"seed": True}, TypeError, "Received: True (bool)"),
        (
            {"seed": -1},
            ValueError,
            "det.keras.init(seed=...) takes an integer from 0 to 2**31 - 1, or None. Received: -1",
        ),
        ({"seed": 2**31}, ValueError, "Received: 2147483648"),
        ({"checkpoint_storage": 5}, TypeError, "det.keras.init(checkpoint_storage=...) takes the path of a directory"),
    ],
)
def test_init_refuses_an_argument_of_the_wrong_kind_naming_it_before_recording(
    tmp_path, monkeypatch, arguments, error, message
):
    import det_estimator as det

    monkeypatch.delenv("DET_CLUSTER_INFO", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error) as raised:
        det.keras.init(**arguments)
    assert message in str(raised.value)
    assert not (tmp_path / "default-store" / "store.sqlite").exists()


@pytest.mark.parametrize(
    ("config", "seed", "recorded"),
    [
        (None, None, 0),
        ({"reproducibility": {"experiment_seed": 7}}, None, 7),
        ({"reproducibility": {"experiment_seed": 7}}, 11, 11),
        (None, 11, 11),
    ],
)
def test_a_run_by_hand_records_its_seed_argument_else_its_configs_else_0(config, seed, recorded):
    # The experiment seed recorded; the test below runs a script whose context and trial use it.
    from det_estimator.keras._api._init import _by_hand_config

    assert _by_hand_config(config, seed)["reproducibility"] == {"experiment_seed": recorded}


def test_a_run_by_hand_records_the_seed_it_uses(tmp_path, det):
    # `experiment resume` of a run by hand paused by Ctrl-C seeds with the recorded seed.
    store = tmp_path / "store.sqlite"
    arguments, seed = "config={'reproducibility': {'experiment_seed': 7}}, seed=11", 11
    script = f"import det_estimator as det\ncontext = det.keras.init({arguments})\nprint('SEED', context.seed)\n"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(store))
    env.pop("DET_CLUSTER_INFO", None)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"SEED {seed}\n" in result.stdout
    (trial,) = json.loads(det(store, "experiment", "describe", 1, "--json").stdout)["trials"]
    assert trial["seed"] == seed
