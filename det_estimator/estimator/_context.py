"""EstimatorContext and EstimatorExperimentalContext: what any tf.estimator workflow gets."""

from typing import Any, Callable, Optional, Union

import tensorflow as tf

from det_estimator import _dataset_cache, _horovod
from det_estimator._dataset_lineage import DatasetShares
from det_estimator.core import DistributedContext, DummyDistributedContext
from det_estimator.errors import TrialDefinitionError
from det_estimator.reducers import MetricReducer


class EstimatorContext:
    """Runtime information and the wrappers a tf.estimator model needs to run on N processes.

    Users get one from the harness (``EstimatorTrialContext`` is a subclass) and call
    :meth:`wrap_optimizer` on their optimizer and :meth:`wrap_dataset` on each dataset
    as soon as they create them.

    Args:
        distributed: where this process stands in the job.
        aggregation_frequency: batches whose gradients are accumulated before they are
            averaged across processes (``optimizations.aggregation_frequency``).
        average_aggregated_gradients: average, rather than sum, the accumulated
            gradients (``optimizations.average_aggregated_gradients``).
        gradient_compression: send gradients as float16 (``optimizations.gradient_compression``).
        seed: the seed cached datasets are shuffled with (the trial seed).

    Attributes:
        distributed: the :class:`DistributedContext` of this process.
        experimental: the :class:`EstimatorExperimentalContext` (``make_metric``, dataset caches).
    """

    def __init__(
        self,
        distributed: Optional[DistributedContext] = None,
        aggregation_frequency: int = 1,
        average_aggregated_gradients: bool = True,
        gradient_compression: bool = False,
        seed: int = 0,
    ):
        self.distributed = distributed or DummyDistributedContext()
        self.seed = seed
        self.experimental = EstimatorExperimentalContext(self)
        self._aggregation_frequency = aggregation_frequency
        self._average_aggregated_gradients = average_aggregated_gradients
        self._gradient_compression = gradient_compression
        self.wrapped_optimizers = 0
        self.wrapped_datasets = 0
        self._shares = DatasetShares(self.distributed.rank, self.distributed.size)
        # As given (a Horovod wrapper leaves its state on them), to release evaluations' graphs.
        self.optimizers: list[Any] = []

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """Returns the optimizer to use in place of ``optimizer``.

        With several processes it is a Horovod ``DistributedOptimizer`` that averages
        gradients across processes as the experiment's ``optimizations`` say; with one
        process it is ``optimizer`` itself.

        Args:
            optimizer: a ``tf.compat.v1.train.Optimizer`` or a Keras optimizer.

        Returns:
            The optimizer to pass to the Estimator.
        """
        self.wrapped_optimizers += 1
        self.optimizers.append(optimizer)
        if self.distributed.size == 1:
            return optimizer
        return _horovod.distributed_optimizer(
            optimizer,
            aggregation_frequency=self._aggregation_frequency,
            average_aggregated_gradients=self._average_aggregated_gradients,
            gradient_compression=self._gradient_compression,
        )

    def wrap_dataset(self, dataset: tf.data.Dataset, shard_dataset: bool = True) -> tf.data.Dataset:
        """Returns the dataset to use in place of ``dataset``.

        With several processes and ``shard_dataset``, each process keeps every
        ``size``-th record starting at its rank (round-robin), so the processes see
        disjoint data that together is the whole dataset. Wrap the dataset before
        batching it.

        Args:
            dataset: the ``tf.data.Dataset`` just created.
            shard_dataset: False when the input pipeline already gives each process its
                own data.

        Returns:
            This process's share of the dataset.

        Raises:
            TypeError: ``dataset`` is not a ``tf.data.Dataset``.
            ValueError: ``dataset`` was built from one that ``wrap_dataset`` sharded or
                that a ``cache_train_dataset`` / ``cache_validation_dataset`` function
                returned: it is this process's share already, and sharding it again
                would drop most of its records.
        """
        if not isinstance(dataset, tf.data.Dataset):
            raise TrialDefinitionError(
                f"Argument `dataset` must be a tf.data.Dataset. Received: {type(dataset).__name__}"
            )
        self.wrapped_datasets += 1
        return self._shares.share_of(dataset, shard_dataset)

    def make_metric(
        self, metric: Any, reducer: Union[Callable[[list[Any]], Any], MetricReducer], numpy_dtype: Any
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Same as ``context.experimental.make_metric``."""
        return self.experimental.make_metric(metric, reducer, numpy_dtype)


class EstimatorExperimentalContext:
    """Experimental features of an :class:`EstimatorContext`, under ``context.experimental``."""

    def __init__(self, context: EstimatorContext):
        self._context = context

    def make_metric(
        self, metric: Any, reducer: Union[Callable[[list[Any]], Any], MetricReducer], numpy_dtype: Any
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """An ``eval_metric_ops`` entry whose value is reduced over every process's data.

        Args:
            metric: a Tensor, a flat list of Tensors, or a flat dict of str to Tensor.
            reducer: a function of the list of all per-batch values, or a
                ``MetricReducer``; every evaluation works on a fresh deep copy of it.
            numpy_dtype: the dtype of the value; anything ``np.dtype()`` accepts.

        Returns:
            ``(value_op, update_op)``.

        Raises:
            TypeError: ``metric``, ``reducer`` or ``numpy_dtype`` is of an unsupported kind.

        See ``det_estimator.reducers.make_metric`` for the details.
        """
        from det_estimator.reducers import make_metric

        return make_metric(metric, reducer, numpy_dtype)

    def cache_train_dataset(
        self, dataset_id: str, dataset_version: str, shuffle: bool = False, skip_shuffle_at_epoch_end: bool = False
    ) -> Callable[[Callable[..., tf.data.Dataset]], Callable[..., tf.data.Dataset]]:
        """Decorates a function that builds the training dataset, so that it is built once and cached.

        The dataset the function returns is saved on this machine's local disk under
        ``dataset_id`` and ``dataset_version`` (a new version builds it again) and read
        back by every later call, trial and run. Each process reads its round-robin
        shard (so do not call ``wrap_dataset`` on it), shuffled with the trial seed when
        ``shuffle`` is set. Batch and augment after caching; the harness repeats the
        dataset and resumes it at its position in the data.

        Args:
            dataset_id: names the dataset: letters, digits, ``_``, ``.`` and ``-``.
            dataset_version: names this version of it, with the same characters.
            shuffle: shuffle the records with the trial seed (buffer of up to
                100,000 records).
            skip_shuffle_at_epoch_end: keep the same shuffled order every epoch.

        Returns:
            The decorator.

        Raises:
            ValueError: an id or version that cannot name a directory.

        Example:
            ::

                @self.context.experimental.cache_train_dataset("clicks", "v1", shuffle=True)
                def make_dataset():
                    return tf.data.Dataset.from_tensor_slices(load_clicks())

                dataset = make_dataset().batch(self.context.get_per_slot_batch_size())
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
            shuffle: shuffle the records with the trial seed (the same order at every
                validation).

        Returns:
            The decorator.
        """
        return self._cached(dataset_id, dataset_version, shuffle, reshuffle_each_iteration=False)

    def _cached(self, dataset_id: str, dataset_version: str, shuffle: bool, reshuffle_each_iteration: bool):
        context = self._context

        def count_as_wrapped(dataset: tf.data.Dataset) -> tf.data.Dataset:
            context.wrapped_datasets += 1  # sharded like wrap_dataset does
            return context._shares.add_cached(dataset)

        return _dataset_cache.caching_decorator(
            dataset_id,
            dataset_version,
            rank=context.distributed.rank,
            size=context.distributed.size,
            shuffle_seed=context.seed if shuffle else None,
            reshuffle_each_iteration=reshuffle_each_iteration,
            on_read=count_as_wrapped,
        )
