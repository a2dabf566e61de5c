"""The reference system's names a ported trial or script uses: ``context.env`` of trial contexts, ``det.LOG_FORMAT``."""

import logging

import pytest

import det_estimator as det
from det_estimator.config import load_experiment_config

RAW = {
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 32, "layers": {"units": 8}},
    "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 10}},
    "resources": {"slots_per_trial": 2},
}


def trial_context(tmp_path, which: str):
    raw = {**RAW, "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    config = load_experiment_config(raw)
    hparams = {"global_batch_size": 32, "layers": {"units": 8}}
    if which == "keras":
        return det.keras.TFKerasTrialContext(config, hparams, 11)
    return det.EstimatorTrialContext(config, hparams, trial_seed=11)


@pytest.mark.parametrize("which", ["keras", pytest.param("estimator", marks=pytest.mark.estimator)])
def test_context_env_is_a_view_of_what_the_context_tells(tmp_path, which):
    context = trial_context(tmp_path, which)
    env = context.env
    assert isinstance(env, det.EnvContext)
    assert env.hparams == context.get_hparams() == {"global_batch_size": 32, "layers": {"units": 8}}
    assert env.experiment_config == context.get_experiment_config()
    assert env.experiment_config["searcher"]["metric"] == "val_loss"
    assert env.trial_seed == context.get_trial_seed() == 11
    assert (env.det_trial_id, env.det_experiment_id) == (str(context.get_trial_id()), str(context.get_experiment_id()))
    assert (env.global_batch_size, env.per_slot_batch_size) == (32, 16)  # two slots
    assert (env.on_cluster, env.managed_training) == (False, True)
    # New copies, as get_hparams() gives: a trial that changes them changes nothing else.
    env.hparams["layers"]["units"] = 1
    assert context.env.hparams["layers"]["units"] == 8


def test_log_format_formats_a_record_as_the_reference_s_does():
    record = logging.LogRecord("my.module", logging.INFO, __file__, 1, "trained %d batches", (5,), None)
    record.process = 1234
    assert logging.Formatter(det.LOG_FORMAT).format(record) == "INFO: [1234] my.module: trained 5 batches"
