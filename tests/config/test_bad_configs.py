"""Each invalid config raises ConfigError with one exact, complete message."""

import datetime

import pytest

from det_estimator.config import ConfigError, load_experiment_config

REMOVE = object()

TOP_LEVEL_KEYS = (
    "checkpoint_policy, checkpoint_storage, data, description, entrypoint, entrypoint_script, environment, "
    "hang_timeout_seconds, hyperparameters, labels, max_restarts, min_checkpoint_period, min_validation_period, "
    "name, optimizations, perform_initial_validation, records_per_epoch, reproducibility, resources, "
    "scheduling_unit, searcher"
)


def searcher(**changes):
    section = {"name": "single", "metric": "auc", "max_length": {"batches": 100}}
    return _apply(section, changes)


def config(**changes):
    raw = {"entrypoint": "model_def:MyTrial", "hyperparameters": {"global_batch_size": 32}, "searcher": searcher()}
    return _apply(raw, changes)


def hparams(**specs):
    return {"global_batch_size": 32, **specs}


def _apply(section, changes):
    for key, value in changes.items():
        if value is REMOVE:
            del section[key]
        else:
            section[key] = value
    return section


CASES = [
    (
        "unknown top-level key",
        config(max_lenght={"batches": 1}),
        f"experiment config: unknown key `max_lenght`. Expected one of: {TOP_LEVEL_KEYS}",
    ),
    (
        "unknown nested key",
        config(searcher=searcher(max_lenght={"batches": 1})),
        "experiment config: unknown key `searcher.max_lenght` (did you mean `max_length`?). Expected one of: "
        "max_length, metric, name, "
        "smaller_is_better",
    ),
    (
        "missing entrypoint",
        config(entrypoint=REMOVE),
        'experiment config: missing required key `entrypoint`, which must be "module:TrialClass" '
        '(e.g. "model_def:MyTrial") or a command (e.g. "python3 train.py").',
    ),
    (
        "entrypoint without a colon",
        config(entrypoint="model_def.MyTrial"),
        'experiment config: `entrypoint` must be "module:TrialClass" (e.g. "model_def:MyTrial") or a command '
        "(e.g. \"python3 train.py\"). Received: 'model_def.MyTrial' (str)",
    ),
    (
        "entrypoint and entrypoint_script",
        config(entrypoint_script="python3 train.py"),
        "experiment config: give either `entrypoint` or `entrypoint_script`, not both. "
        "Received: entrypoint='model_def:MyTrial' (str), entrypoint_script='python3 train.py' (str)",
    ),
    (
        "entrypoint_script that is not a command",
        config(entrypoint=REMOVE, entrypoint_script=""),
        "experiment config: `entrypoint_script` must be a command, e.g. \"python3 train.py\". Received: '' (str)",
    ),
    (
        "missing global_batch_size",
        config(hyperparameters={"lr": 0.1}),
        "experiment config: missing required key `hyperparameters.global_batch_size`, which must be a positive "
        "integer.",
    ),
    (
        "float global_batch_size",
        config(hyperparameters={"global_batch_size": 32.5}),
        "experiment config: `hyperparameters.global_batch_size` must be a positive integer. Received: 32.5 (float)",
    ),
    (
        "bool global_batch_size",
        config(hyperparameters={"global_batch_size": True}),
        "experiment config: `hyperparameters.global_batch_size` must be a positive integer. Received: True (bool)",
    ),
    (
        "const global_batch_size of zero",
        config(hyperparameters={"global_batch_size": {"type": "const", "val": 0}}),
        "experiment config: `hyperparameters.global_batch_size.val` must be a positive integer. Received: 0 (int)",
    ),
    (
        "double global_batch_size",
        config(hyperparameters={"global_batch_size": {"type": "double", "minval": 8, "maxval": 64}}),
        "experiment config: `hyperparameters.global_batch_size` must be a positive integer, or a const, int or "
        "categorical hyperparameter whose values are positive integers. Received: "
        "{'type': 'double', 'minval': 8, 'maxval': 64} (dict)",
    ),
    (
        "global_batch_size smaller than slots_per_trial",
        config(hyperparameters={"global_batch_size": 2}, resources={"slots_per_trial": 4}),
        "experiment config: `hyperparameters.global_batch_size` must be at least `resources.slots_per_trial` (4), "
        "so that every slot gets at least one record per batch. Received: 2 (int)",
    ),
    (
        "bool where an int is expected",
        config(scheduling_unit=True),
        "experiment config: `scheduling_unit` must be a positive integer. Received: True (bool)",
    ),
    (
        "negative scheduling_unit",
        config(scheduling_unit=-5),
        "experiment config: `scheduling_unit` must be a positive integer. Received: -5 (int)",
    ),
    (
        "negative records_per_epoch",
        config(records_per_epoch=-1),
        "experiment config: `records_per_epoch` must be a non-negative integer. Received: -1 (int)",
    ),
    (
        "length with two keys",
        config(searcher=searcher(max_length={"batches": 10, "epochs": 1})),
        "experiment config: `searcher.max_length` must be a mapping with exactly one of the keys batches, epochs or "
        "records, e.g. {batches: 1000}. Received: {'batches': 10, 'epochs': 1} (dict)",
    ),
    (
        "length of zero",
        config(searcher=searcher(max_length={"batches": 0})),
        "experiment config: `searcher.max_length.batches` must be a positive integer. Received: 0 (int)",
    ),
    (
        "length with an unknown unit",
        config(searcher=searcher(max_length={"steps": 10})),
        "experiment config: unknown key `searcher.max_length.steps`. Expected one of: batches, epochs, records",
    ),
    (
        "length as a bare number",
        config(min_validation_period=100),
        "experiment config: `min_validation_period` must be a mapping with exactly one of the keys batches, epochs "
        "or records, e.g. {batches: 1000}. Received: 100 (int)",
    ),
    (
        "epochs without records_per_epoch",
        config(searcher=searcher(max_length={"epochs": 2})),
        "experiment config: `searcher.max_length` is given in epochs, which needs `records_per_epoch` (a positive "
        "integer) in the experiment config; it has none.",
    ),
    (
        "min_checkpoint_period in epochs without records_per_epoch",
        config(min_checkpoint_period={"epochs": 1}),
        "experiment config: `min_checkpoint_period` is given in epochs, which needs `records_per_epoch` (a positive "
        "integer) in the experiment config; it has none.",
    ),
    (
        "unknown searcher",
        config(searcher=searcher(name="bayesian")),
        "experiment config: `searcher.name` must be one of: adaptive_asha, grid, random, single, tpe. "
        "Received: 'bayesian' (str)",
    ),
    (
        "searcher of the reference format not supported yet",
        config(searcher=searcher(name="pbt", max_trials=16)),
        "experiment config: `searcher.name` must be one of: adaptive_asha, grid, random, single, tpe "
        "(the \"pbt\" searcher is not supported yet). Received: 'pbt' (str)",
    ),
    (
        "searcher name that is not a string",
        config(searcher=searcher(name=["random"])),
        "experiment config: `searcher.name` must be one of: adaptive_asha, grid, random, single, tpe. "
        "Received: ['random'] (list)",
    ),
    (
        "max_trials with the single searcher",
        config(searcher=searcher(max_trials=4)),
        "experiment config: `searcher.max_trials` is not supported by the `single` searcher, which runs exactly one "
        "trial; remove it. Received: 4 (int)",
    ),
    (
        "source_trial_id",
        config(searcher=searcher(source_trial_id=3)),
        "experiment config: unknown key `searcher.source_trial_id`. Expected one of: max_length, metric, name, "
        "smaller_is_better",
    ),
    (
        "missing metric",
        config(searcher=searcher(metric=REMOVE)),
        "experiment config: missing required key `searcher.metric`, which must be a non-empty string.",
    ),
    (
        "missing searcher",
        config(searcher=REMOVE),
        "experiment config: missing required key `searcher`, which must be a mapping of keys to values.",
    ),
    (
        "bad checkpoint_policy",
        config(checkpoint_policy="latest"),
        "experiment config: `checkpoint_policy` must be one of: all, best, none. Received: 'latest' (str)",
    ),
    (
        "s3 checkpoint storage",
        config(checkpoint_storage={"type": "s3", "bucket": "models"}),
        'experiment config: `checkpoint_storage.type` must be "shared_fs" (checkpoint storage type "s3" is not '
        "supported yet). Received: 's3' (str)",
    ),
    (
        "checkpoint storage without host_path",
        config(checkpoint_storage={"type": "shared_fs"}),
        "experiment config: missing required key `checkpoint_storage.host_path`, which must be a non-empty string.",
    ),
    (
        "checkpoint storage_path outside host_path",
        config(checkpoint_storage={"type": "shared_fs", "host_path": "/ckpt", "storage_path": "../elsewhere"}),
        "experiment config: `checkpoint_storage.storage_path` must be a relative path inside `host_path`. "
        "Received: '../elsewhere' (str)",
    ),
    (
        "negative save_trial_best",
        config(checkpoint_storage={"type": "shared_fs", "host_path": "/ckpt", "save_trial_best": -1}),
        "experiment config: `checkpoint_storage.save_trial_best` must be a non-negative integer. Received: -1 (int)",
    ),
    (
        "resources key not supported yet",
        config(resources={"slots_per_trial": 2, "native_parallel": True}),
        "experiment config: key `resources.native_parallel` is not supported yet. Remove it; supported keys: "
        "slots_per_trial",
    ),
    (
        "hyperparameter minval greater than maxval",
        config(hyperparameters=hparams(lr={"type": "double", "minval": 0.5, "maxval": 0.1})),
        "experiment config: `hyperparameters.lr.minval` must be less than or equal to `hyperparameters.lr.maxval` "
        "(0.1). Received: 0.5 (float)",
    ),
    (
        "unknown hyperparameter type",
        config(hyperparameters=hparams(lr={"type": "float", "minval": 0.1, "maxval": 0.5})),
        "experiment config: `hyperparameters.lr.type` must be one of: categorical, const, double, int, log. "
        "Received: 'float' (str)",
    ),
    (
        "categorical with no vals",
        config(hyperparameters=hparams(act={"type": "categorical", "vals": []})),
        "experiment config: `hyperparameters.act.vals` must be a non-empty list. Received: [] (list)",
    ),
    (
        "unknown key in a hyperparameter spec",
        config(hyperparameters=hparams(units={"type": "int", "minval": 1, "maxval": 8, "vals": [1]})),
        "experiment config: unknown key `hyperparameters.units.vals`. Expected one of: count, maxval, minval, type",
    ),
    (
        "int hyperparameter with a float bound",
        config(hyperparameters=hparams(units={"type": "int", "minval": 1, "maxval": 8.5})),
        "experiment config: `hyperparameters.units.maxval` must be an integer. Received: 8.5 (float)",
    ),
    (
        "log hyperparameter with base 1",
        config(hyperparameters=hparams(lr={"type": "log", "minval": -4, "maxval": -1, "base": 1})),
        "experiment config: `hyperparameters.lr.base` must be a positive number other than 1 (1 ** x is 1 for every "
        "x; use type: const). Received: 1 (int)",
    ),
    (
        "log hyperparameter with base 0",
        config(hyperparameters=hparams(lr={"type": "log", "minval": -4, "maxval": -1, "base": 0})),
        "experiment config: `hyperparameters.lr.base` must be a positive number. Received: 0 (int)",
    ),
    (
        "log hyperparameter whose power overflows",
        config(hyperparameters=hparams(lr={"type": "log", "minval": -1, "maxval": 400, "base": 10})),
        "experiment config: `hyperparameters.lr.maxval` must be small enough in magnitude that 10 ** maxval is a "
        "finite float. Received: 400 (int)",
    ),
    (
        "hyperparameter count of 0",
        config(hyperparameters=hparams(wd={"type": "double", "minval": 0, "maxval": 1, "count": 0})),
        "experiment config: `hyperparameters.wd.count` must be a positive integer. Received: 0 (int)",
    ),
    (
        "bad spec inside a nested group",
        config(hyperparameters=hparams(optimizer={"lr": {"type": "double", "minval": 1, "maxval": "2"}})),
        "experiment config: `hyperparameters.optimizer.lr.maxval` must be a finite number. Received: '2' (str)",
    ),
    (
        "experiment_seed of 2**31",
        config(reproducibility={"experiment_seed": 2**31}),
        "experiment config: `reproducibility.experiment_seed` must be an integer from 0 to 2147483647. "
        "Received: 2147483648 (int)",
    ),
    (
        "negative experiment_seed",
        config(reproducibility={"experiment_seed": -1}),
        "experiment config: `reproducibility.experiment_seed` must be an integer from 0 to 2147483647. "
        "Received: -1 (int)",
    ),
    (
        "label that is not a string",
        config(labels=["ctr", 7]),
        "experiment config: `labels[1]` must be a string. Received: 7 (int)",
    ),
    (
        "date inside data",
        config(data={"train": {"since": datetime.date(2024, 1, 31)}}),
        "experiment config: `data.train.since` must be a JSON value (null, a boolean, a number, a string, a list or "
        "a mapping). Received: datetime.date(2024, 1, 31) (date)",
    ),
    (
        "non-boolean optimization flag",
        config(optimizations={"gradient_compression": "yes"}),
        "experiment config: `optimizations.gradient_compression` must be a boolean (true or false). "
        "Received: 'yes' (str)",
    ),
    (
        "entrypoint command with a NUL character",
        config(entrypoint="python3 train.py --tag a\0b"),
        'experiment config: `entrypoint` must be "module:TrialClass" (e.g. "model_def:MyTrial") or a command '
        "(e.g. \"python3 train.py\"), without NUL characters. Received: 'python3 train.py --tag a\\x00b' (str)",
    ),
    (
        "environment variable with a NUL character",
        config(environment={"environment_variables": ["TAG=a\0b"]}),
        "experiment config: `environment.environment_variables.TAG` must be a string without NUL characters. "
        "Received: 'a\\x00b' (str)",
    ),
    (
        "host_path with a NUL character",
        config(checkpoint_storage={"type": "shared_fs", "host_path": "ck\0x"}),
        "experiment config: `checkpoint_storage.host_path` must be a path without NUL characters. "
        "Received: 'ck\\x00x' (str)",
    ),
    (
        "storage_path with a NUL character",
        config(checkpoint_storage={"type": "shared_fs", "host_path": "ck", "storage_path": "a\0b"}),
        "experiment config: `checkpoint_storage.storage_path` must be a relative path inside `host_path`. "
        "Received: 'a\\x00b' (str)",
    ),
    (
        "max_length beyond a 64-bit integer",
        config(searcher=searcher(max_length={"batches": 2**63})),
        "experiment config: `searcher.max_length.batches` must be a positive integer of at most 2**63 - 1. "
        "Received: 9223372036854775808 (int)",
    ),
    (
        "global_batch_size beyond a 64-bit integer",
        config(hyperparameters=hparams(global_batch_size=10**30)),
        "experiment config: `hyperparameters.global_batch_size` must be a positive integer of at most 2**63 - 1. "
        "Received: 1000000000000000000000000000000 (int)",
    ),
    (
        "int hyperparameter bound beyond a 64-bit integer",
        config(hyperparameters=hparams(units={"type": "int", "minval": -(2**64), "maxval": 4})),
        "experiment config: `hyperparameters.units.minval` must be an integer from -2**63 to 2**63 - 1. "
        "Received: -18446744073709551616 (int)",
    ),
    (
        "max_trials beyond a 64-bit integer",
        config(searcher=searcher(name="random", max_trials=2**64)),
        "experiment config: `searcher.max_trials` must be a positive integer of at most 2**63 - 1. "
        "Received: 18446744073709551616 (int)",
    ),
    (
        "a length in epochs of more batches than a 64-bit integer",
        config(records_per_epoch=64, min_validation_period={"epochs": 2**62}),
        "experiment config: `min_validation_period` comes to 9223372036854775808 batches (of 32 records, with "
        "records_per_epoch 64); expected at most 2**63 - 1. Received: {'epochs': 4611686018427387904}",
    ),
]


@pytest.mark.parametrize(("raw", "message"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_config_raises_one_exact_message(raw, message):
    with pytest.raises(ConfigError) as error:
        load_experiment_config(raw)
    assert str(error.value) == message


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_the_first_error_in_field_order_is_reported():
    raw = config(entrypoint="bad", scheduling_unit=0)
    with pytest.raises(ConfigError, match="`entrypoint`"):
        load_experiment_config(raw)


def _contains_itself():
    loop = {}
    loop["again"] = loop
    return loop


def _nested_lists(levels):
    value = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (config(data={"loop": _contains_itself()}), "data.loop.again.again.again.again.again.again.again.again..."),
        (config(data={"deep": _nested_lists(5000)}), "data.deep[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]..."),
        (
            config(hyperparameters=hparams(group=_contains_itself())),
            "hyperparameters.group.again.again.again.again.again.again...",
        ),
    ],
    ids=["a mapping that contains itself", "lists nested 5000 deep", "a hyperparameter group that contains itself"],
)
def test_a_value_nested_without_end_is_refused_not_a_recursion_error(raw, path):
    with pytest.raises(ConfigError) as error:
        load_experiment_config(raw)
    assert str(error.value) == (
        f"experiment config: `{path}` nests lists and mappings more than 100 levels deep (or contains itself). "
        "Expected a value of ordinary shape; keep deeply nested data in files that the trial reads."
    )
