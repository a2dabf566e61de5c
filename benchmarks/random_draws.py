"""The cost of restorable random draws: TensorFlow's stateful dropout against det-estimator's.

While the training graph is built, det-estimator builds each uniform, normal and
truncated normal draw from a checkpointed ``tf.random.Generator`` (see
``det_estimator.estimator._random_streams.py``). This prints the time of a training
step's worth of dropout both ways, interleaved in one run, and their ratio.

Usage: ``.venv/bin/python benchmarks/random_draws.py [--steps N] [--repeats R]``
"""

import argparse
import contextlib
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from det_estimator.estimator._random_streams import restorable_random_ops  # noqa: E402


def build_session(restorable: bool):
    """A session and an op applying four dropout layers to a 256 x 512 batch."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1)
        activations = tf.ones([256, 512])
        with restorable_random_ops() if restorable else contextlib.nullcontext():
            for _ in range(4):
                activations = tf.nn.dropout(activations, rate=0.3)
        step = tf.reduce_sum(activations)
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
    return session, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    variants = {"TensorFlow stateful ops": build_session(False), "checkpointed generators": build_session(True)}
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for session, step in variants.values():
        for _ in range(50):  # warm-up
            session.run(step)
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits both alike
        for name, (session, step) in variants.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                session.run(step)
            timings[name].append((time.perf_counter() - start) / args.steps * 1e6)
    print(f"Four dropout layers on a 256 x 512 batch, median of {args.repeats} runs of {args.steps} steps")
    medians = {name: statistics.median(values) for name, values in timings.items()}
    for name, median in medians.items():
        print(f"  {name:<25} {median:8.0f} us/step   best {min(timings[name]):.0f}")
    ratio = medians["checkpointed generators"] / medians["TensorFlow stateful ops"]
    print(f"  ratio checkpointed / TensorFlow: {ratio:.2f}")


if __name__ == "__main__":
    main()
