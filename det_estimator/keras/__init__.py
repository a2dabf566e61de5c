"""The tf.keras trial type: ``TFKerasTrial``, its context, callbacks and exact distributed metrics, on the Core API.

Names follow the reference system's ``determined.keras`` module, so a trial that used
``det.keras.TFKerasTrial`` ports by changing ``import determined as det`` to
``import det_estimator as det``. A Keras trial runs on the same harness as an
``EstimatorTrial``: the same experiment config, store, command, checkpoints, pauses and
metrics.
"""

from det_estimator.keras import callbacks
from det_estimator.keras._api import KerasContext, init
from det_estimator.keras._context import TFKerasExperimentalContext, TFKerasTrialContext
from det_estimator.keras._determined_callback import DeterminedCallback
from det_estimator.keras._engine import _keras_compat
from det_estimator.keras._engine._sequences import SequenceAdapter
from det_estimator.keras._load import load_model_from_checkpoint_path
from det_estimator.keras._reducer_metric import ReducerMetric
from det_estimator.keras._trial import InputData, TFKerasTrial
from det_estimator.keras.callbacks import TFKerasTensorBoard
from det_estimator.keras.callbacks._tensorboard import CoreTensorBoard as TensorBoard

# Keras 3's fit under a MultiWorkerMirroredStrategy of several workers fails before its first step
# without it, whatever the script's callbacks (a DeterminedCallback, or none: a model.evaluate).
_keras_compat.repair_multi_worker_fit()

__all__ = [
    "DeterminedCallback",
    "InputData",
    "KerasContext",
    "ReducerMetric",
    "SequenceAdapter",
    "TFKerasExperimentalContext",
    "TFKerasTensorBoard",
    "TFKerasTrial",
    "TFKerasTrialContext",
    "TensorBoard",
    "callbacks",
    "init",
    "load_model_from_checkpoint_path",
]
