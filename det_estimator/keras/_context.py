"""TFKerasTrialContext and TFKerasExperimentalContext: what a TFKerasTrial gets from the harness."""

import functools
import logging
import weakref
from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator import _dataset_cache, _horovod
from det_estimator._dataset_lineage import DatasetShares
from det_estimator._trial_context_base import TrialContextBase
from det_estimator.config import ExperimentConfig
from det_estimator.core import DistributedContext, DummyDistributedContext
from det_estimator.keras._fit_config import NOT_PROVIDED, FitConfig

logger = logging.getLogger("det_estimator.keras")


class TFKerasTrialContext(TrialContextBase):
    """The context of one Keras trial: hyperparameters, batch sizes, seed, and the wrappers for N processes.

    Call :meth:`wrap_model` on the model as soon as it is created, :meth:`wrap_optimizer`
    on the optimizer, and :meth:`wrap_dataset` on each ``tf.data.Dataset`` right after
    creating it; on one process they change nothing, on several they make the trial
    distributed. :meth:`configure_fit` sets what ``model.fit()`` would take.

    Args:
        config: the validated experiment config.
        hparams: this trial's hyperparameter values.
        trial_seed: the seed of this trial.
        distributed: where this process stands in the job.
        trial_id: the trial's id in the experiment store.
        experiment_id: its experiment's id.

    Attributes:
        distributed: the :class:`~det_estimator.core.DistributedContext` of this process.
        experimental: the :class:`TFKerasExperimentalContext` (dataset caches).
        fit_config: the settings :meth:`configure_fit` made so far.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        hparams: dict[str, Any],
        trial_seed: int,
        distributed: Optional[DistributedContext] = None,
        trial_id: int = 0,
        experiment_id: int = 0,
    ) -> None:
        self.distributed = distributed or DummyDistributedContext()
        self.experimental = TFKerasExperimentalContext(self)
        self.fit_config = FitConfig()
        TrialContextBase.__init__(self, config, hparams, trial_seed, trial_id, experiment_id)
        self._wrapped_models: weakref.WeakSet = weakref.WeakSet()
        self._wrapped_optimizers: weakref.WeakSet = weakref.WeakSet()
        self._shares = DatasetShares(self.distributed.rank, self.distributed.size)

    # The wrappers.

    def wrap_model(self, model: Any) -> Any:
        """Returns the model to use in place of ``model``: call it right after creating the model, before compile().

        The model itself is returned; its ``compile()`` then puts the optimizer through
        :meth:`wrap_optimizer` if it was not already (so that on several processes the
        gradients are averaged over all of them).

        Args:
            model: the ``tf.keras.Model`` just created.

        Returns:
            The model.

        Raises:
            TypeError: ``model`` is not a ``tf.keras.Model``.
        """
        if not isinstance(model, tf.keras.Model):
            raise TypeError(f"Argument `model` must be a tf.keras.Model. Received: {type(model).__name__}")
        if model in self._wrapped_models:
            return model
        compile_model = model.compile

        @functools.wraps(compile_model)
        def compile_with_wrapped_optimizer(*args: Any, **kwargs: Any) -> Any:
            if args:
                optimizer, args = args[0], args[1:]
            else:
                optimizer = kwargs.pop("optimizer", "rmsprop")
            return compile_model(self._distributed(optimizer), *args, **kwargs)

        # Set on the instance without Keras' attribute tracking: it is not part of the model.
        object.__setattr__(model, "compile", compile_with_wrapped_optimizer)
        self._wrapped_models.add(model)
        return model

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """Returns the optimizer to use in place of ``optimizer``.

        With several Horovod processes it is a Horovod ``DistributedOptimizer`` (a new
        optimizer of a subclass of the same class and config) that averages gradients over
        all processes as the experiment's ``optimizations`` say; its variables are saved and
        restored with every checkpoint. With one process, or under the TensorFlow launcher
        (a ``MultiWorkerMirroredStrategy``, which averages the gradients itself), it is
        ``optimizer`` itself.

        Args:
            optimizer: a ``tf.keras.optimizers.Optimizer`` (or a name Keras knows, like "adam").

        Returns:
            The optimizer to pass to ``model.compile()``.
        """
        if self.distributed.size == 1 or not _horovod.is_distributed():
            return optimizer  # one process, or the workers of a tf.distribute strategy, which averages the gradients
        if optimizer in self._wrapped_optimizers:
            return optimizer
        optimizations = self._config.optimizations
        wrapped = _horovod.keras_distributed_optimizer(
            tf.keras.optimizers.get(optimizer),
            aggregation_frequency=optimizations.aggregation_frequency,
            average_aggregated_gradients=optimizations.average_aggregated_gradients,
            gradient_compression=optimizations.gradient_compression,
        )
        self._wrapped_optimizers.add(wrapped)
        return wrapped

    def wrap_dataset(self, dataset: Any, shard_dataset: bool = True) -> Any:
        """Returns the dataset to use in place of ``dataset``: call it right after creating the dataset.

        With several processes and ``shard_dataset``, each process keeps every
        ``size``-th record starting at its rank (round-robin), so that the processes see
        disjoint data that together is the whole dataset. Wrap each dataset (training
        and validation) before batching it; on several processes a ``tf.data.Dataset``
        never wrapped is an error.

        Args:
            dataset: the ``tf.data.Dataset`` just created.
            shard_dataset: False when the input pipeline already gives each process its
                own data.

        Returns:
            This process's share of the dataset.

        Raises:
            TypeError: ``dataset`` is not a ``tf.data.Dataset``.
            TrialDefinitionError: ``dataset`` was built from one that ``wrap_dataset``
                sharded or that a dataset cache returned: it is this process's share
                already, and sharding it again would drop most of its records.
        """
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"Argument `dataset` must be a tf.data.Dataset. Received: {type(dataset).__name__}")
        return self._shares.share_of(dataset, shard_dataset)

    def configure_fit(
        self,
        verbose: Optional[bool] = None,
        class_weight: Any = NOT_PROVIDED,
        workers: Optional[int] = None,
        use_multiprocessing: Optional[bool] = None,
        max_queue_size: Optional[int] = None,
        shuffle: Optional[bool] = None,
        validation_steps: Any = NOT_PROVIDED,
    ) -> None:
        """Sets what ``model.fit()`` would take; arguments left out keep what earlier calls set.

        Call it in the trial's ``__init__`` or builders. The defaults are Keras' own,
        except that ``verbose`` prints one line per workload and validation (from the
        chief) instead of a progress bar, which reads better in a trial's log.

        Args:
            verbose: print a line per workload and validation (default True).
            class_weight: class index to a weight for the loss of its training examples
                (default None).
            workers: threads or processes reading a ``keras.utils.Sequence`` ahead
                (default 1; 0 reads in the input pipeline itself). A
                :class:`SequenceAdapter`'s own setting wins.
            use_multiprocessing: read Sequences in processes instead of threads (default False).
            max_queue_size: batches of a Sequence read ahead at most (default 10).
            shuffle: shuffle NumPy records and the order of a Sequence's batches every
                epoch, with the trial seed (default True); a ``tf.data.Dataset`` is
                shuffled by its own pipeline.
            validation_steps: batches of a validation ``tf.data.Dataset`` each process
                evaluates (default None: to its end).

        Raises:
            TypeError: a value of the wrong type.
            ValueError: a number out of range.

        Example:
            ::

                self.context.configure_fit(verbose=False, workers=5)
                self.context.configure_fit(use_multiprocessing=True)  # workers stays 5
        """
        self.fit_config = self.fit_config.updated(
            verbose=verbose,
            class_weight=class_weight,
            workers=workers,
            use_multiprocessing=use_multiprocessing,
            max_queue_size=max_queue_size,
            shuffle=shuffle,
            validation_steps=validation_steps,
        )

    # What the controller asks about the wrappers.

    def is_wrapped_model(self, model: Any) -> bool:
        """Whether ``model`` went through :meth:`wrap_model`."""
        return model in self._wrapped_models

    def is_wrapped_optimizer(self, optimizer: Any) -> bool:
        """Whether ``optimizer`` averages gradients over the processes (always true on one process).

        The optimizer Keras wraps for mixed precision counts by the one inside it.
        """
        if self.distributed.size == 1 or not _horovod.is_distributed() or optimizer in self._wrapped_optimizers:
            # Under a tf.distribute strategy (no Horovod) every optimizer averages over the workers.
            return True
        inner = getattr(optimizer, "inner_optimizer", None)
        return inner is not None and inner in self._wrapped_optimizers

    def is_wrapped_dataset(self, dataset: tf.data.Dataset) -> bool:
        """Whether ``dataset`` was built from a dataset :meth:`wrap_dataset` (or a cache) returned."""
        return self._shares.handed_out(dataset)

    def _distributed(self, optimizer: Any) -> Any:
        if self.is_wrapped_optimizer(optimizer):
            return optimizer
        logger.warning(
            "model.compile() got an optimizer that did not go through context.wrap_optimizer(): it is wrapped so "
            "that its gradients are averaged over the %d processes.",
            self.distributed.size,
        )
        return self.wrap_optimizer(optimizer)


class TFKerasExperimentalContext:
    """Experimental features of a :class:`TFKerasTrialContext`, under ``context.experimental``."""

    def __init__(self, context: TFKerasTrialContext) -> None:
        self._context = context

    def cache_train_dataset(
        self, dataset_id: str, dataset_version: str, shuffle: bool = False, skip_shuffle_at_epoch_end: bool = False
    ) -> Callable[[Callable[..., tf.data.Dataset]], Callable[..., tf.data.Dataset]]:
        """Decorates a function that builds the training dataset, so that it is built once per machine and cached.

        As ``EstimatorExperimentalContext.cache_train_dataset``: the dataset is saved
        under ``dataset_id`` and ``dataset_version`` and read back by every later call,
        trial and run; each process reads its round-robin shard (so do not call
        ``wrap_dataset`` on it), shuffled with the trial seed when ``shuffle`` is set.
        Batch after caching.

        Args:
            dataset_id: names the dataset: letters, digits, ``_``, ``.`` and ``-``.
            dataset_version: names this version of it, with the same characters.
            shuffle: shuffle the records with the trial seed.
            skip_shuffle_at_epoch_end: keep the same shuffled order every epoch.

        Returns:
            The decorator.

        Raises:
            ValueError: an id or version that cannot name a directory.
        """
        return self._cached(
            dataset_id, dataset_version, shuffle, reshuffle_each_iteration=not skip_shuffle_at_epoch_end
        )

    def cache_validation_dataset(
        self, dataset_id: str, dataset_version: str, shuffle: bool = False
    ) -> Callable[[Callable[..., tf.data.Dataset]], Callable[..., tf.data.Dataset]]:
        """Decorates a function that builds the validation dataset, like :meth:`cache_train_dataset`.

        Args:
            dataset_id: names the dataset.
            dataset_version: names this version of it.
            shuffle: shuffle the records with the trial seed (the same order at every validation).

        Returns:
            The decorator.
        """
        return self._cached(dataset_id, dataset_version, shuffle, reshuffle_each_iteration=False)

    def _cached(self, dataset_id: str, dataset_version: str, shuffle: bool, reshuffle_each_iteration: bool):
        context = self._context
        return _dataset_cache.caching_decorator(
            dataset_id,
            dataset_version,
            rank=context.distributed.rank,
            size=context.distributed.size,
            shuffle_seed=context.get_trial_seed() if shuffle else None,
            reshuffle_each_iteration=reshuffle_each_iteration,
            on_read=context._shares.add_cached,  # sharded as wrap_dataset would
        )
