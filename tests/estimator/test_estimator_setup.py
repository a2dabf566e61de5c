import tempfile
from pathlib import Path
from types import SimpleNamespace

import tensorflow as tf

from det_estimator.core import DummyDistributedContext
from det_estimator.estimator._estimator_setup import GraphRecorder, _session_config, rebuild_estimator


def model_fn(features, labels, mode):
    raise AssertionError("never built here")


def rebuilt(estimator, model_dir):
    return rebuild_estimator(estimator, str(model_dir), 0, DummyDistributedContext(), GraphRecorder())


def test_the_folder_tensorflow_made_for_an_estimator_without_model_dir_is_removed(tmp_path):
    user_estimator = tf.estimator.Estimator(model_fn)
    automatic = Path(user_estimator.model_dir)
    assert automatic.parent == Path(tempfile.gettempdir()) and automatic.is_dir()
    estimator = rebuilt(user_estimator, tmp_path / "run")
    assert estimator.model_dir == str(tmp_path / "run")
    assert not automatic.exists()


def test_a_model_dir_the_user_chose_or_filled_is_left_alone(tmp_path):
    chosen = tmp_path / "tmp_chosen"
    chosen.mkdir()
    rebuilt(tf.estimator.Estimator(model_fn, model_dir=str(chosen)), tmp_path / "run")
    assert chosen.is_dir()
    filled = Path(tempfile.mkdtemp())
    (filled / "checkpoint").write_text("kept")
    try:
        rebuilt(tf.estimator.Estimator(model_fn, model_dir=str(filled)), tmp_path / "run")
        assert (filled / "checkpoint").read_text() == "kept"
    finally:
        (filled / "checkpoint").unlink()
        filled.rmdir()


def test_each_process_gets_its_local_rank_gpu_and_shares_them_when_there_are_fewer(monkeypatch):
    def visible(gpus: int, local_rank: int) -> str:
        monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: [f"GPU:{i}" for i in range(gpus)])
        process = SimpleNamespace(size=4, local_rank=local_rank)
        return _session_config(None, process).gpu_options.visible_device_list

    assert [visible(4, rank) for rank in range(4)] == ["0", "1", "2", "3"]
    # Two GPUs for four processes: never a GPU 2 or 3, which TensorFlow would refuse.
    assert [visible(2, rank) for rank in range(4)] == ["0", "1", "0", "1"]
    assert visible(0, 3) == ""
