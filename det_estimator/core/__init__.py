"""The Core API: one context through which every trial type and training script reports.

``core.init()`` returns a :class:`Context` with five narrow parts:

- ``distributed``: this process's rank in the job, and collectives of Python objects;
- ``train``: training and validation metrics, and progress, into the experiment store;
- ``checkpoint``: checkpoints written atomically and kept as the config says;
- ``preempt``: whether to checkpoint and stop now (``experiment pause``, Ctrl-C);
- ``searcher``: how long to train.

The estimator and Keras harnesses are clients of it, and so can be any training
script::

    import det_estimator as det

    with det.core.init() as core_context:
        for op in core_context.searcher.operations():
            ...

Nothing here imports TensorFlow, except ``DistributedContext.from_tf_config()``.
"""

from det_estimator.core._checkpoint import CheckpointContext, CheckpointError, DownloadMode, RetentionPolicy
from det_estimator.core._context import Context, RefusedOnAnotherProcessError, build_context, init
from det_estimator.core._distributed import DistributedContext, DummyDistributedContext
from det_estimator.core._preempt import PreemptContext, PreemptMode
from det_estimator.core._searcher import (
    SearcherContext,
    SearcherMode,
    SearcherOperation,
    SearcherUsageError,
    Unit,
)
from det_estimator.core._store import CoreStore
from det_estimator.core._train import EarlyExitReason, SearcherMetricError, TrainContext
from det_estimator.core._transport import CollectiveMismatchError, PeerGoneError

__all__ = [
    "CheckpointContext",
    "CheckpointError",
    "CollectiveMismatchError",
    "Context",
    "CoreStore",
    "DistributedContext",
    "DownloadMode",
    "DummyDistributedContext",
    "EarlyExitReason",
    "PeerGoneError",
    "PreemptContext",
    "PreemptMode",
    "RefusedOnAnotherProcessError",
    "RetentionPolicy",
    "SearcherContext",
    "SearcherMetricError",
    "SearcherMode",
    "SearcherOperation",
    "SearcherUsageError",
    "TrainContext",
    "Unit",
    "build_context",
    "init",
]
