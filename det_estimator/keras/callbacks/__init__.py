"""Callbacks for TFKerasTrial: stateful callbacks kept across pauses, and the ones that act on validations.

``Callback`` adds workload and checkpoint hooks and a state saved in every checkpoint to
Keras' callback. ``EarlyStopping`` and ``ReduceLROnPlateau`` are Keras' own, acting on
every validation (combined over all processes) instead of every epoch, and keeping
their whole state across pauses. ``TensorBoard`` writes into the trial's TensorBoard
directory. Plain ``tf.keras.callbacks`` callbacks also run; see :class:`Callback` for
how their hooks are called.
"""

from det_estimator.keras.callbacks._callback import Callback
from det_estimator.keras.callbacks._early_stopping import EarlyStopping
from det_estimator.keras.callbacks._reduce_lr_on_plateau import ReduceLROnPlateau, ReduceLRScheduler
from det_estimator.keras.callbacks._tensorboard import TensorBoard, TFKerasTensorBoard

__all__ = [
    "Callback",
    "EarlyStopping",
    "ReduceLROnPlateau",
    "ReduceLRScheduler",
    "TFKerasTensorBoard",
    "TensorBoard",
]
