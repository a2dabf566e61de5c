"""Which of det-estimator's two stacks this environment is, found without importing TensorFlow.

The *estimator* stack is TensorFlow 2.15 with tensorflow-estimator (and Horovod, built for
it); the *current* stack is a TensorFlow without tf.estimator (2.16 and later), with Keras 3
or tf-keras. The estimator half of the package (``det_estimator.estimator``,
``det_estimator.hooks``) refuses to import on the current stack with one error that says
what to install; everything else imports on both.
"""

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from det_estimator.errors import EstimatorUnavailableError

ESTIMATOR = "estimator"
CURRENT = "current"
# The packages and modules that need tf.estimator: each refuses to import without it.
ESTIMATOR_MODULES = ("det_estimator.estimator", "det_estimator.hooks", "det_estimator.experimental.estimator")


def _found(module: str) -> bool:
    # find_spec looks the module up without running it; a module set to None in
    # sys.modules (as an import blocker does) counts as missing, as importing it would fail.
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def has_estimator() -> bool:
    """Whether tf.estimator can be imported (tensorflow-estimator, which TensorFlow 2.15 is the last to use)."""
    return _found("tensorflow_estimator")


def has_horovod() -> bool:
    """Whether Horovod's TensorFlow module is installed (whether it was built for TensorFlow is ``env``'s to say)."""
    return _found("horovod")


def needs_estimator(module: str) -> bool:
    """Whether the module of this name is (or is inside) one of :data:`ESTIMATOR_MODULES`."""
    return any(module == name or module.startswith(name + ".") for name in ESTIMATOR_MODULES)


def stack() -> str:
    """``"estimator"`` where tf.estimator is installed, else ``"current"``."""
    return ESTIMATOR if has_estimator() else CURRENT


def require_estimator(module: str) -> None:
    """Raises :class:`EstimatorUnavailableError` naming ``module`` unless tf.estimator can be imported.

    Args:
        module: the module that needs tf.estimator, named in the message.
    """
    if has_estimator():
        return
    tensorflow = _tensorflow_version()
    where = f"TensorFlow {tensorflow} does not have" if tensorflow else "is not installed (nor is TensorFlow)"
    raise EstimatorUnavailableError(
        f"{module} needs tf.estimator, which {where}: "
        "TensorFlow 2.16 and later ship no tf.estimator (tensorflow-estimator ended with 2.15). The Keras and "
        "Core APIs (det_estimator.keras, det_estimator.core) work here. To run Estimator trials, install the "
        "estimator stack on Python 3.9 to 3.11: pip install 'det-estimator[estimator]' (or "
        "`bash scripts/setup.sh` in a checkout, which builds it with Horovod)."
    )


def _tensorflow_version() -> Optional[str]:
    return _version("tensorflow") or _version("tensorflow-cpu")


@dataclass(frozen=True)
class StackReport:
    """What ``det-estimator env`` says of the stack: its name, versions, and what runs on it.

    Attributes:
        name: ``"estimator"`` or ``"current"``.
        tensorflow: the installed TensorFlow's version, or None.
        keras: the Keras a model gets: ``"2.15.0 (tf.keras)"``, ``"3.x (Keras 3)"`` or
            ``"2.x (tf-keras, TF_USE_LEGACY_KERAS=1)"``; None without one.
        estimator: whether tf.estimator is installed (Estimator trials run).
        horovod: whether Horovod is installed (multi-process runs under horovodrun).
    """

    name: str
    tensorflow: Optional[str]
    keras: Optional[str]
    estimator: bool
    horovod: bool


def _version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def legacy_keras_requested(environ: Mapping[str, str]) -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` asks TensorFlow for tf-keras, read as TensorFlow reads it."""
    return environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True")


def keras_in_use(tensorflow: Optional[str], legacy: bool) -> Optional[str]:
    """The Keras ``tf.keras`` is for this TensorFlow, with its version, from what is installed.

    Args:
        tensorflow: TensorFlow's version, or None.
        legacy: whether ``TF_USE_LEGACY_KERAS`` asks for tf-keras.
    """
    if tensorflow is None:
        return None
    major_minor = tuple(int(part) for part in tensorflow.split(".")[:2] if part.isdigit())
    if major_minor < (2, 16):
        # TensorFlow 2.15's tf.keras is the keras 2.15 distribution.
        keras = _version("keras")
        return f"{keras} (tf.keras)" if keras else None
    if legacy:
        tf_keras = _version("tf-keras") or _version("tf_keras")
        return f"{tf_keras} (tf-keras, TF_USE_LEGACY_KERAS=1)" if tf_keras else "tf-keras requested, not installed"
    keras = _version("keras")
    return f"{keras} (Keras 3)" if keras else None


def report(legacy_keras: bool) -> StackReport:
    """The stack of this environment, without importing TensorFlow.

    Args:
        legacy_keras: whether ``TF_USE_LEGACY_KERAS`` is set to a true value.
    """
    tensorflow = _tensorflow_version()
    return StackReport(
        name=stack(),
        tensorflow=tensorflow,
        keras=keras_in_use(tensorflow, legacy_keras),
        estimator=has_estimator(),
        horovod=has_horovod(),
    )
