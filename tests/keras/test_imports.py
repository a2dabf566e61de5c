"""The Keras trial type keeps the layering: a controller on core, imported by the worker alone, Horovod via _horovod."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def layering(module_loader):
    return module_loader(TESTS / "test_layering.py")


def modules_importing(layering, imported_package):
    found = {}
    for path in sorted(layering.PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(layering.PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        hits = [name for name in layering._imports(path) if layering._within(name, imported_package)]
        if hits:
            found[module] = hits
    return found


def test_the_keras_package_imports_no_front_end_orchestration_worker_or_other_trial_type(layering):
    forbidden = (
        *layering._FRONT_ENDS,
        "det_estimator.orchestration",
        "det_estimator.launcher",
        "det_estimator.worker",
        "det_estimator.estimator",
    )
    violations = [
        f"{module} imports {name}"
        for module, names in modules_importing(layering, "det_estimator").items()
        if layering._within(module, "det_estimator.keras")
        for name in names
        if any(layering._within(name, bad) for bad in forbidden)
    ]
    assert not violations


def test_only_the_worker_registry_and_the_package_itself_import_the_keras_package(layering):
    importers = {module for module in modules_importing(layering, "det_estimator.keras")}
    assert {module for module in importers if not module.startswith("det_estimator.keras")} == {
        "det_estimator",
        "det_estimator.worker._run",
    }


def test_nothing_in_the_keras_package_imports_horovod_itself():
    sources = sorted((TESTS.parent / "det_estimator" / "keras").rglob("*.py"))
    assert sources and not [path for path in sources if "import horovod" in path.read_text()]


def test_importing_det_estimator_keras_loads_no_horovod():
    code = (
        "import sys, det_estimator as det; det.keras.TFKerasTrial; "
        "print(any(m.startswith('horovod') for m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
