"""Random ops of the training graph whose state the checkpoint saves.

TensorFlow 1's stateful random ops (``RandomUniform`` and its kin, behind
``tf.random.uniform``, ``tf.nn.dropout`` and Keras' dropout in graph mode) keep
their position in a kernel that no checkpoint can save: after a resume they
would start again from the seed, and a resumed trial would train differently
from an uninterrupted one.

While the training graph is built, the controller therefore builds each such op
from a ``tf.random.Generator`` of its own: the same distribution and seeds, but
with the position held in a variable that the checkpoint saves and restores.
Each op gets its own generator, not one shared by the graph, because ops that run
in parallel would race for the draws of a shared one and make runs irreproducible.
Variable initializers keep TensorFlow's ops: they run once, before any restore.
"""

import contextlib
from collections.abc import Iterator
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.ops import gen_random_ops

# Stateful random op types that a checkpoint cannot restore. Ops under an
# "Initializer" name scope are left out: they only initialize variables.
LEGACY_RANDOM_OP_TYPES = frozenset(
    {
        "RandomUniform",
        "RandomUniformInt",
        "RandomStandardNormal",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "RandomShuffle",
        "Multinomial",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
    }
)


def _generator(seed: int, seed2: int) -> tf.random.Generator:
    """A generator seeded from both op seeds, created outside any control flow."""
    # init_scope lifts the state variable out of while loops, conds and functions,
    # where a variable cannot be created.
    with tf.init_scope():
        return tf.random.Generator.from_seed((seed % 2**32) * 2**32 + seed2 % 2**32, alg="philox")


def _initializes_a_variable() -> bool:
    return "Initializer" in tf.compat.v1.get_default_graph().get_name_scope().split("/")


def _substitute(original: Callable[..., tf.Tensor], draw: Callable[..., tf.Tensor]) -> Callable[..., tf.Tensor]:
    def build(*args: Any, seed: int = 0, seed2: int = 0, name: Any = None) -> tf.Tensor:
        if tf.executing_eagerly() or _initializes_a_variable():
            return original(*args, seed=seed, seed2=seed2, name=name)
        return draw(_generator(seed, seed2), *args, name=name)

    return build


_SUBSTITUTES: dict[str, Callable[..., Any]] = {
    "random_uniform": lambda g, shape, dtype, name: g.uniform(shape, dtype=dtype, name=name),
    "random_uniform_int": lambda g, shape, low, high, name: g.uniform(
        shape, minval=low, maxval=high, dtype=tf.convert_to_tensor(low).dtype, name=name
    ),
    "random_standard_normal": lambda g, shape, dtype, name: g.normal(shape, dtype=dtype, name=name),
    "truncated_normal": lambda g, shape, dtype, name: g.truncated_normal(shape, dtype=dtype, name=name),
}


@contextlib.contextmanager
def restorable_random_ops() -> Iterator[None]:
    """While active, the common stateful random ops are built from checkpointed generators.

    Covers uniform (float and int), normal and truncated normal draws, which
    ``tf.random.*``, ``tf.nn.dropout`` and Keras' dropout and noise layers build.
    Rarer ops (``tf.random.shuffle``, ``tf.random.categorical``, ...) stay as they
    are; :func:`unrestorable_random_ops` finds them.
    """
    originals = {name: getattr(gen_random_ops, name) for name in _SUBSTITUTES}
    for name, draw in _SUBSTITUTES.items():
        setattr(gen_random_ops, name, _substitute(originals[name], draw))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gen_random_ops, name, original)


def unrestorable_random_ops(graph: tf.Graph) -> list[str]:
    """Names of the graph's stateful random ops, outside variable initializers."""
    return [
        op.name
        for op in graph.get_operations()
        if op.type in LEGACY_RANDOM_OP_TYPES and "Initializer" not in op.name.split("/")
    ]
