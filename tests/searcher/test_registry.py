import dataclasses
import subprocess
import sys

import pytest

from det_estimator.searcher import (
    AdaptiveASHASearch,
    GridSearch,
    RandomSearch,
    SingleSearch,
    TPESearch,
    make_search_method,
)

CLASSES = {
    "single": ({"name": "single"}, SingleSearch),
    "random": ({"name": "random", "max_trials": 3}, RandomSearch),
    "grid": ({"name": "grid"}, GridSearch),
    "adaptive_asha": ({"name": "adaptive_asha", "max_trials": 3}, AdaptiveASHASearch),
    "tpe": ({"name": "tpe", "max_trials": 3}, TPESearch),
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_searcher_name_builds_its_method(sim, name):
    section, cls = CLASSES[name]
    space = {"global_batch_size": 32}
    method = make_search_method(sim.make_config(section, space))
    assert type(method) is cls and cls.name == name


def test_an_unimplemented_name_is_refused(sim):
    config = sim.make_config({"name": "single"})
    config = dataclasses.replace(config, searcher=dataclasses.replace(config.searcher, name="pbt"))
    with pytest.raises(ValueError, match="must be one of: adaptive_asha, grid, random, single, tpe. Received: 'pbt'"):
        make_search_method(config)


def test_importing_the_searcher_imports_neither_tensorflow_nor_optuna():
    code = "import sys, det_estimator.searcher; print(sorted({'tensorflow', 'optuna', 'horovod'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
