"""One benchmark on both stacks, interleaved, with the figures of each side by side in one table.

Runs ``BENCHMARK`` (``keras_train_overhead``, ``keras_reducer_metric`` or
``horovod_vs_mwms``) with the estimator stack's Python (``.venv``: TensorFlow 2.15, Keras
2.15, Horovod) and the current stack's (``.venv-current``: TensorFlow 2.21 with Keras 3,
or with tf-keras as ``current-tf-keras``), alternating, ``--rounds`` times each, so that
a change in the machine's load hits every stack alike. Each run writes its figures (its
own summary of its ``--repeats``) to a file; this prints, per figure and stack, the
median over the rounds and the range.

Usage::

    python benchmarks/stacks.py BENCHMARK [--stacks estimator,current] [--rounds 3] [-- BENCHMARK ARGS]

Either venv's Python runs it (it imports nothing but the standard library); the venvs
are the checkout's, or those ``--estimator-venv`` and ``--current-venv`` name.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional

BENCHMARKS_DIR = Path(__file__).resolve().parent
BENCHMARKS = ("keras_train_overhead", "keras_reducer_metric", "horovod_vs_mwms")
# What each stack's runs report about themselves: read by the stack's own Python, without TensorFlow.
_DESCRIBE = """
import importlib.metadata, json, os, platform
from det_estimator import _stack
report = _stack.report(_stack.legacy_keras_requested(os.environ))
print(json.dumps({"python": platform.python_version(), "tensorflow": report.tensorflow, "keras": report.keras,
                  "numpy": importlib.metadata.version("numpy"), "horovod": report.horovod}))
"""


class Figure(NamedTuple):
    """One figure a benchmark run prints: what it is, its value and its unit."""

    name: str
    value: float
    unit: str


class Stack(NamedTuple):
    """A stack to run a benchmark on: its venv and whether Keras is tf-keras there."""

    name: str
    venv: Path
    legacy_keras: bool

    def environment(self) -> dict[str, str]:
        environment = {key: value for key, value in os.environ.items() if key != "TF_USE_LEGACY_KERAS"}
        if self.legacy_keras:
            environment["TF_USE_LEGACY_KERAS"] = "1"
        return environment


def write_figures(path: Optional[str], figures: list[Figure]) -> None:
    """Writes a run's figures to ``path`` (a benchmark's ``--figures``), for this driver; nothing if None."""
    if path is not None:
        Path(path).write_text(json.dumps([list(figure) for figure in figures]))


def _read_figures(path: Path) -> list[Figure]:
    return [Figure(str(name), float(value), str(unit)) for name, value, unit in json.loads(path.read_text())]


def _stacks(names: str, estimator_venv: Path, current_venv: Path) -> list[Stack]:
    known = {
        "estimator": Stack("estimator", estimator_venv, False),
        "current": Stack("current", current_venv, False),
        "current-tf-keras": Stack("current-tf-keras", current_venv, True),
    }
    chosen = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise ValueError(f"--stacks {names!r}: expected a comma-separated list of {', '.join(known)}")
    stacks = [known[name] for name in dict.fromkeys(chosen)]
    for stack in stacks:
        if not (stack.venv / "bin" / "python").is_file():
            raise ValueError(f"stack {stack.name}: there is no {stack.venv}/bin/python; set it up, or name its venv")
    return stacks


def _describe(stack: Stack) -> str:
    result = subprocess.run(
        [str(stack.venv / "bin" / "python"), "-c", _DESCRIBE],
        capture_output=True,
        text=True,
        env=stack.environment(),
        check=True,
    )
    versions = json.loads(result.stdout)
    horovod = "Horovod" if versions["horovod"] else "no Horovod"
    return (
        f"Python {versions['python']}, TensorFlow {versions['tensorflow']}, Keras {versions['keras']}, "
        f"NumPy {versions['numpy']}, {horovod}"
    )


def _run(stack: Stack, benchmark: str, arguments: list[str]) -> tuple[Optional[list[Figure]], str]:
    """One run of the benchmark on the stack: its figures, or None and the end of its output."""
    with tempfile.TemporaryDirectory(prefix="stacks-") as directory:
        figures_path = Path(directory) / "figures.json"
        command = [str(stack.venv / "bin" / "python"), str(BENCHMARKS_DIR / f"{benchmark}.py")]
        command += [*arguments, "--figures", str(figures_path)]
        result = subprocess.run(command, capture_output=True, text=True, env=stack.environment(), cwd=BENCHMARKS_DIR)
        if result.returncode != 0 or not figures_path.is_file():
            return None, (result.stdout[-1500:] + result.stderr[-1500:]).strip()
        return _read_figures(figures_path), ""


def _cell(values: list[float], unit: str, failed: bool) -> str:
    """The median of a figure's values over the rounds, and their range."""
    if not values:
        return "failed" if failed else "-"  # "-": the stack's runs do not have this figure (no Horovod)
    formats = {"x": ".3f", "s": ".2f", "": ".2e"}

    def show(value: float) -> str:
        return format(value, formats.get(unit, ".1f"))

    median = show(statistics.median(values))
    return median if len(values) == 1 else f"{median} [{show(min(values))}, {show(max(values))}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", choices=BENCHMARKS)
    parser.add_argument("--stacks", default="estimator,current", help="of estimator, current, current-tf-keras")
    parser.add_argument("--rounds", type=int, default=3, help="runs on each stack, interleaved")
    parser.add_argument("--estimator-venv", type=Path, default=BENCHMARKS_DIR.parent / ".venv")
    parser.add_argument("--current-venv", type=Path, default=BENCHMARKS_DIR.parent / ".venv-current")
    parser.epilog = "Arguments after -- go to the benchmark."
    # What follows -- is the benchmark's, its options included.
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    arguments = argv[split + 1 :]
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected at least 1")
    try:
        stacks = _stacks(args.stacks, args.estimator_venv.resolve(), args.current_venv.resolve())
    except ValueError as error:
        parser.error(str(error))

    values: dict[str, dict[str, list[float]]] = {}
    units: dict[str, str] = {}
    failures: dict[str, str] = {}
    for round_index in range(args.rounds):
        # Alternate which stack goes first, so that neither always runs on a machine the other warmed.
        for stack in stacks if round_index % 2 == 0 else stacks[::-1]:
            if stack.name in failures:
                continue  # a stack that failed once would fail again: its error is printed at the end
            progress = f"round {round_index + 1}/{args.rounds}: {args.benchmark} on {stack.name}"
            print(progress, file=sys.stderr, flush=True)
            figures, output = _run(stack, args.benchmark, arguments)
            if figures is None:
                failures[stack.name] = output
                continue
            for figure in figures:
                units[figure.name] = figure.unit
                values.setdefault(figure.name, {}).setdefault(stack.name, []).append(figure.value)

    print(f"{args.benchmark} {' '.join(arguments)}".rstrip() + f": {args.rounds} round(s) on each stack, interleaved")
    for stack in stacks:
        print(f"  {stack.name:17} {_describe(stack)}")
    width = max([len(f"{name} ({unit})") for name, unit in units.items()] + [24])
    print(f"\n  {'median [min, max] over rounds':{width}}" + "".join(f"  {stack.name:>28}" for stack in stacks))
    for name, per_stack in values.items():
        label = f"{name} ({units[name]})" if units[name] else name
        cells = [_cell(per_stack.get(stack.name, []), units[name], stack.name in failures) for stack in stacks]
        print(f"  {label:{width}}" + "".join(f"  {cell:>28}" for cell in cells))
    for name, output in failures.items():
        print(f"\n{name}: a run failed; the end of its output:\n{output}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
