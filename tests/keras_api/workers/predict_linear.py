"""A batch-inference job of the tests: a trained trial's model predicts ``inputs()``; the chief saves them."""

from pathlib import Path

import numpy as np

import det_estimator as det


def inputs() -> np.ndarray:
    """101 rows: uneven over two processes."""
    return np.random.default_rng(9).normal(size=(101, 3)).astype("float32")


def main() -> None:
    context = det.keras.init()
    settings = context.config_data
    model = context.load_checkpoint_model(trial_id=settings["trial_id"], best=True)
    x = context.wrap_data(inputs())
    predictions = context.predict(model, x, batch_size=settings["batch_size"], verbose=0)
    if context.distributed.rank == 0:
        np.save(Path(settings["output"]), predictions)
    print(f"process {context.distributed.rank} of {context.distributed.size} predicted {len(x)} rows", flush=True)


if __name__ == "__main__":
    main()
