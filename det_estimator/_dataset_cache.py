"""The local dataset cache behind ``cache_train_dataset`` and ``cache_validation_dataset``.

A cached dataset lives in ``<root>/<dataset_id>/<dataset_version>/`` on the machine's
local disk (``root`` is ``$XDG_CACHE_HOME/det-estimator/datasets``, by default
``~/.cache/det-estimator/datasets``). It is written with ``tf.data.Dataset.save`` into
a temporary directory that is renamed into place once complete, so a cache whose
writer crashed is never read; one process per machine builds it, under a file lock,
and every later trial and run with the same id and version reads it.
"""

import fcntl
import functools
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator._names import DIRECTORY_NAME_RULE, is_directory_name

_COMPLETE = "complete.json"
_DATA = "data"
# Shuffling keeps this many records in memory at most.
MAX_SHUFFLE_BUFFER = 100_000


def default_cache_root() -> Path:
    """Where cached datasets live on this machine."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "det-estimator" / "datasets"


def check_name(argument: str, value: str) -> None:
    """Rejects an id or version that cannot name a directory.

    Raises:
        ValueError: ``value`` is not letters, digits, ``_``, ``.`` and ``-``.
    """
    if not is_directory_name(value):
        raise ValueError(f"Argument `{argument}` must {DIRECTORY_NAME_RULE}. Received: {argument}={value!r}")


def get_or_build(
    root: Path, dataset_id: str, dataset_version: str, make_dataset: Callable[[], tf.data.Dataset]
) -> tuple[Path, int]:
    """The directory of the cached dataset and its number of records, building it if needed."""
    final = root / dataset_id / dataset_version
    final.parent.mkdir(parents=True, exist_ok=True)
    if not (final / _COMPLETE).exists():
        with _locked(final.parent / f".{dataset_version}.lock"):
            if not (final / _COMPLETE).exists():  # another process may have built it meanwhile
                _build(final, make_dataset)
    records = json.loads((final / _COMPLETE).read_text(encoding="utf-8"))["records"]
    return final / _DATA, records


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _build(final: Path, make_dataset: Callable[[], tf.data.Dataset]) -> None:
    partial = final.parent / f".partial-{final.name}-{uuid.uuid4().hex}"
    try:
        # A graph and session of their own: the decorated function is called from an
        # input_fn, inside the Estimator's graph, which must not grow the save ops.
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            dataset = make_dataset()
            if not isinstance(dataset, tf.data.Dataset):
                raise TypeError(
                    "A function decorated with cache_train_dataset or cache_validation_dataset must return a "
                    f"tf.data.Dataset. Received: {type(dataset).__name__}"
                )
            save = dataset.save(str(partial / _DATA))
            if save is not None:
                session.run(save)
            # Built only now: loading reads the metadata that the save just wrote.
            saved = tf.data.Dataset.load(str(partial / _DATA))
            records = int(session.run(saved.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)))
        (partial / _COMPLETE).write_text(json.dumps({"records": records}), encoding="utf-8")
        if final.exists():  # left by something other than this code: not trusted
            shutil.rmtree(final)
        os.rename(partial, final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def read(path: Path, records: int, rank: int, size: int, shuffle_seed, reshuffle_each_iteration: bool):
    """The cached dataset as this process sees it: its round-robin shard, shuffled if a seed is given."""
    dataset = tf.data.Dataset.load(str(path))
    if size > 1:
        dataset = dataset.shard(size, rank)
    if shuffle_seed is not None:
        buffer = max(1, min(records // max(size, 1) + 1, MAX_SHUFFLE_BUFFER))
        dataset = dataset.shuffle(buffer, seed=shuffle_seed, reshuffle_each_iteration=reshuffle_each_iteration)
    return dataset


DatasetFunction = Callable[..., tf.data.Dataset]


def caching_decorator(
    dataset_id: str,
    dataset_version: str,
    rank: int,
    size: int,
    shuffle_seed: Optional[int],
    reshuffle_each_iteration: bool,
    on_read: Callable[[tf.data.Dataset], tf.data.Dataset],
) -> Callable[[DatasetFunction], DatasetFunction]:
    """What ``cache_train_dataset`` and ``cache_validation_dataset`` return, for the Estimator and Keras contexts.

    The decorated function builds the dataset only when no cache of ``dataset_id`` and
    ``dataset_version`` is complete; it then returns this process's shard of the cache
    (see :func:`read`), passed through ``on_read``, which counts it as wrapped.

    Raises:
        ValueError: ``dataset_id`` or ``dataset_version`` cannot name a directory.
    """
    check_name("dataset_id", dataset_id)
    check_name("dataset_version", dataset_version)

    def decorator(make_dataset: DatasetFunction) -> DatasetFunction:
        @functools.wraps(make_dataset)
        def cached_dataset(*args: Any, **kwargs: Any) -> tf.data.Dataset:
            path, records = get_or_build(
                default_cache_root(), dataset_id, dataset_version, lambda: make_dataset(*args, **kwargs)
            )
            return on_read(read(path, records, rank, size, shuffle_seed, reshuffle_each_iteration))

        return cached_dataset

    return decorator
