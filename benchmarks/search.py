"""Random search against adaptive ASHA on the digits DNN, and what the scheduler costs, side by side in one run.

Prints, for each searcher with the same ``max_trials`` and hyperparameter space
(``examples/digits_dnn/adaptive.yaml``):

1. the best validation macro F1 it reaches and the batches it trains in all (goal:
   ASHA reaches the random search's best, within noise, with at most a third of the batches);
2. the scheduler's overhead: per trial run, its wall time beyond its batches at the
   steady training rate (process start, imports, graph building, validations and
   checkpoints), and the share of slot-seconds left idle while the experiment ran.

Usage: ``.venv/bin/python benchmarks/search.py [--max-trials 16] [--slots 2]``
"""

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from det_estimator.store import ExperimentStore, MetricKind

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits_dnn"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def run(store: Path, config: dict, slots: int, directory: Path) -> int:
    path = directory / f"{config['searcher']['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run(
        [COMMAND, "--store", str(store), "experiment", "create", str(path), str(EXAMPLE), "--slots", str(slots)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    with ExperimentStore(store) as opened:
        return opened.experiments()[-1].id


def steady_rate(store: ExperimentStore, trial_ids: list[int]) -> float:
    """Batches per second between consecutive training reports of the same run (the steady state)."""
    rates = []
    for trial_id in trial_ids:
        reports = store.metrics(trial_id, MetricKind.TRAINING)
        for before, after in zip(reports, reports[1:]):
            if after.run_id == before.run_id and after.batches > before.batches:
                rates.append((after.batches - before.batches) / (after.recorded_at - before.recorded_at))
    return statistics.median(rates)


def figures(store_path: Path, experiment_id: int, slots: int, rate: float) -> dict:
    with ExperimentStore(store_path) as store:
        trials = store.trials(experiment_id)
        runs = [run for trial in trials for run in store.trial_runs(trial.id)]
        overheads = []
        for trial in trials:
            for run in store.trial_runs(trial.id):
                reports = [m for m in store.metrics(trial.id, MetricKind.TRAINING) if m.run_id == run.id]
                batches = (reports[-1].batches if reports else run.start_batches) - run.start_batches
                overheads.append(run.ended_at - run.started_at - batches / rate)
        start, end = min(run.started_at for run in runs), max(run.ended_at for run in runs)
        busy = sum(run.ended_at - run.started_at for run in runs)
        return {
            "best": store.best_validation(experiment_id).value,
            "batches": sum(trial.batches_trained for trial in trials),
            "runs": len(runs),
            "overhead": statistics.median(overheads),
            "idle": 1.0 - busy / (slots * (end - start)),
            "wall": end - start,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-trials", type=int, default=16)
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args()
    asha = yaml.safe_load((EXAMPLE / "adaptive.yaml").read_text())
    asha["searcher"]["max_trials"] = args.max_trials
    asha["searcher"]["max_concurrent_trials"] = args.slots
    random_search = copy.deepcopy(asha)
    random_search["searcher"] = {
        key: asha["searcher"][key] for key in ("metric", "smaller_is_better", "max_length", "max_concurrent_trials")
    }
    random_search["searcher"].update(name="random", max_trials=args.max_trials)
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for config in (asha, random_search):
            config["checkpoint_storage"]["host_path"] = str(directory / "checkpoints")
        store = directory / "store.sqlite"
        ids = {
            name: run(store, config, args.slots, directory)
            for name, config in (("random", random_search), ("adaptive_asha", asha))
        }
        with ExperimentStore(store) as opened:
            rate = steady_rate(opened, [t.id for t in opened.trials(ids["random"])])
        results = {name: figures(store, experiment_id, args.slots, rate) for name, experiment_id in ids.items()}

    print(f"\nDigits DNN, {args.max_trials} trials, {args.slots} slots, max_length 16 epochs (359 batches)")
    titles = ("best macro F1", "batches", "runs", "wall s", "run overhead s", "idle slots")
    print(f"{'searcher':<15}" + "".join(f"{title:>{width}}" for title, width in zip(titles, (15, 10, 6, 9, 16, 12))))
    for name, found in results.items():
        print(
            f"{name:<15}{found['best']:>15.4f}{found['batches']:>10}{found['runs']:>6}{found['wall']:>9.0f}"
            f"{found['overhead']:>16.1f}{found['idle']:>11.0%}"
        )
    ratio = results["adaptive_asha"]["batches"] / results["random"]["batches"]
    gap = results["random"]["best"] - results["adaptive_asha"]["best"]
    print(f"\nASHA / random batches: {ratio:.2f} (goal <= 0.33); random best - ASHA best: {gap:+.4f} macro F1")
    print(f"steady training rate: {rate:.0f} batches/s; run overhead = wall time beyond batches at that rate")


if __name__ == "__main__":
    main()
