"""Seeds derived from the experiment seed, so that a search is the same every time it runs."""

import hashlib

# The range of reproducibility.experiment_seed, which trial seeds keep.
_SEED_RANGE = 2**31


def derive_seed(experiment_seed: int, *parts: object) -> int:
    """Derives a seed from the experiment seed and a few labels.

    A hash rather than a random.Random stream: the seed for one label does not
    depend on how many seeds were derived before it, so a resumed search
    derives exactly the seeds an uninterrupted one would.

    Args:
        experiment_seed: ``reproducibility.experiment_seed``.
        *parts: Labels that tell this seed from the others, e.g. ``("trial", 3)``.

    Returns:
        A seed in ``[0, 2**31)``.
    """
    text = ":".join(str(part) for part in (experiment_seed, *parts))
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % _SEED_RANGE


def trial_seed(experiment_seed: int, request_id: int) -> int:
    """Returns the seed of a trial of a multi-trial search.

    Args:
        experiment_seed: ``reproducibility.experiment_seed``.
        request_id: The trial's number in the search.

    Returns:
        A seed in ``[0, 2**31)``.
    """
    return derive_seed(experiment_seed, "trial", request_id)
