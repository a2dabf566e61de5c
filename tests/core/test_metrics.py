"""The cross-rank metric policy: combined over uneven shares, it gives the values of all the data together."""

import numpy as np
import pytest
from sklearn.metrics import log_loss, precision_score, roc_auc_score

from det_estimator import core
from det_estimator.core._metrics import RankMetrics, combine, combine_across_ranks


def uneven_shares(rng: np.random.Generator, records: int, ranks: int) -> list[np.ndarray]:
    """Indices of ``records`` split at random points over ``ranks`` shares, one of them empty."""
    cuts = np.sort(rng.choice(np.arange(1, records), size=ranks - 2, replace=False))
    shares = np.split(rng.permutation(records), cuts)
    return [np.array([], dtype=int), *shares]


def labelled_scores(rng: np.random.Generator, records: int) -> tuple[np.ndarray, np.ndarray]:
    labels = (rng.random(records) < 0.3).astype(int)
    # Rounded, so that scores tie within and across shares.
    scores = np.round(np.clip(0.3 * labels + rng.normal(0.4, 0.25, records), 0.001, 0.999), 2)
    return labels, scores


@pytest.mark.parametrize("seed", range(5))
def test_weighted_values_of_uneven_shares_are_the_values_of_all_the_data(seed):
    rng = np.random.default_rng(seed)
    labels, scores = labelled_scores(rng, 500)
    shares = uneven_shares(rng, 500, ranks=4)
    per_rank = [
        RankMetrics(
            examples=len(share),
            values={"log_loss": log_loss(labels[share], scores[share], labels=[0, 1])} if len(share) else {},
        )
        for share in shares
    ]

    combined = combine(per_rank)

    assert combined.examples == 500
    assert combined.values["log_loss"] == pytest.approx(log_loss(labels, scores), rel=1e-12)
    # The pitfall the policy exists for: the mean of the shares' values is another number.
    mean_of_shares = np.mean([rank.values["log_loss"] for rank in per_rank if rank.examples])
    assert abs(mean_of_shares - log_loss(labels, scores)) > 1e-4


@pytest.mark.parametrize("seed", range(5))
def test_summed_states_of_uneven_shares_are_the_state_of_all_the_data(seed):
    rng = np.random.default_rng(seed)
    labels, scores = labelled_scores(rng, 400)
    predicted = (scores > 0.5).astype(int)

    def confusion(share: np.ndarray) -> list[np.ndarray]:
        true, guess = labels[share], predicted[share]
        return [np.array([np.sum(true & guess), np.sum(~true & guess)], dtype=np.int64), np.array(len(share))]

    per_rank = [
        RankMetrics(examples=len(share), states={"precision": confusion(share)}) for share in uneven_shares(rng, 400, 3)
    ]

    (counts, records) = combine(per_rank).states["precision"]

    assert records == 400
    true_positives, false_positives = counts
    assert true_positives / (true_positives + false_positives) == pytest.approx(precision_score(labels, predicted))


def test_global_values_pass_through_from_the_first_rank_that_has_them_even_without_examples():
    rng = np.random.default_rng(7)
    labels, scores = labelled_scores(rng, 300)
    auc = roc_auc_score(labels, scores)  # what a reducer gives every rank, whatever its share
    per_rank = [
        RankMetrics(examples=0, global_values={"auc": auc, "global_step": 12}),
        RankMetrics(examples=300, values={"loss": 0.5}, global_values={"auc": auc, "global_step": 12}),
    ]

    combined = combine(per_rank)

    assert combined.values == {"auc": auc, "global_step": 12, "loss": 0.5}


def test_a_value_some_ranks_lack_is_weighted_over_the_ranks_that_have_it():
    per_rank = [
        RankMetrics(examples=3, values={"loss": 1.0, "lr": 0.1}),
        RankMetrics(examples=1, values={"loss": 5.0}),
        RankMetrics(examples=0, values={"loss": 100.0, "lr": 100.0}),  # saw nothing: ignored
    ]

    assert combine(per_rank).values == {"loss": pytest.approx(2.0), "lr": pytest.approx(0.1)}


def test_no_examples_anywhere_leaves_states_summed_and_no_value():
    per_rank = [RankMetrics(examples=0, values={"loss": float("nan")}, states={"m": [np.zeros(2)]})] * 2

    combined = combine(per_rank)

    assert combined.examples == 0
    assert combined.values == {}
    np.testing.assert_array_equal(combined.states["m"][0], np.zeros(2))


def test_ranks_holding_different_states_of_a_metric_are_refused_naming_it():
    per_rank = [RankMetrics(examples=1, states={"auc": [np.zeros(3)] * 4}), RankMetrics(examples=1, states={})]

    with pytest.raises(ValueError, match=r"different states of metric 'auc'.*\[4, None\]"):
        combine(per_rank)


class TwoRanks:
    """Rank 0 of a job of two, whose other rank contributes ``other``; counts its collectives."""

    rank, size = 0, 2

    def __init__(self, other: RankMetrics) -> None:
        self.other = other
        self.collectives = 0

    def allgather(self, stuff):
        self.collectives += 1
        return [stuff, self.other]


def test_combining_across_ranks_gathers_every_rank_once_or_not_at_all():
    mine, other = RankMetrics(examples=1, values={"loss": 1.0}), RankMetrics(examples=3, values={"loss": 3.0})
    job = TwoRanks(other)

    assert combine_across_ranks(mine, job).values == {"loss": pytest.approx(2.5)}
    assert job.collectives == 1
    assert combine_across_ranks(mine, job, across_ranks=False).values == {"loss": 1.0}
    assert job.collectives == 1
    assert combine_across_ranks(mine, core.DummyDistributedContext()).values == {"loss": 1.0}
