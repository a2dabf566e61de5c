import bisect
import math

import pytest

from det_estimator.config import AshaBracket
from det_estimator.searcher import (
    AdaptiveASHASearch,
    Close,
    Create,
    ExitedReason,
    SearcherError,
    Shutdown,
    ValidateAfter,
    make_search_method,
)

WORKED_EXAMPLE = {"name": "adaptive_asha", "max_trials": 512, "divisor": 4, "mode": "standard"}
WORKED_BRACKETS = (
    AshaBracket(5, 363, 6, (25, 100, 400, 1600, 6400)),
    AshaBracket(4, 112, 5, (100, 400, 1600, 6400)),
    AshaBracket(3, 37, 5, (400, 1600, 6400)),
)
# Aggressive, divisor 2, max_length 16, 4 trials one at a time: one bracket with rungs at 4, 8 and 16.
SMALL = {"name": "adaptive_asha", "max_trials": 4, "divisor": 2, "mode": "aggressive", "max_concurrent_trials": 1}


def bracket_of(config):
    """Maps a trial to its bracket by its first rung length (distinct per bracket in these configs)."""
    first = {bracket.rung_lengths[0]: index for index, bracket in enumerate(config.searcher.asha_brackets())}
    return lambda request_id, trial: first[trial.lengths[0]]


def drive(method, script):
    """Feeds (event, expected operations) pairs to a method, checking each answer."""
    for event, expected in script:
        kind, request_id, *args = event
        if kind == "validation":
            ops = method.on_validation_completed(request_id, *args)
        elif kind == "closed":
            ops = method.on_trial_closed(request_id)
        else:
            ops = method.on_trial_exited_early(request_id, *args)
        assert ops == expected, f"after {event}"


def ids(ops):
    return [(type(op).__name__, op.request_id) for op in ops if not isinstance(op, Shutdown)]


def test_worked_example_brackets_and_first_trials(sim):
    config = sim.make_config(WORKED_EXAMPLE, max_length=6400)
    assert config.searcher.asha_brackets() == WORKED_BRACKETS
    method = make_search_method(config)
    assert isinstance(method, AdaptiveASHASearch)
    ops = method.initial_operations()
    assert [op.request_id for op in ops if isinstance(op, Create)] == list(range(16))
    assert [op.length for op in ops if isinstance(op, ValidateAfter)] == [25] * 6 + [100] * 5 + [400] * 5
    assert [op.request_id for op in ops if isinstance(op, ValidateAfter)] == list(range(16))


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_worked_example_runs_to_the_end(sim, stop_once):
    config = sim.make_config({**WORKED_EXAMPLE, "stop_once": stop_once}, max_length=6400)
    run = sim.simulate(config, order=1, group=bracket_of(config))
    assert run.shutdown == Shutdown(failure=False)
    assert len(run.trials) == 512
    per_bracket = [0, 0, 0]
    for trial in run.trials.values():
        index = bracket_of(config)(None, trial)
        per_bracket[index] += 1
        bracket = WORKED_BRACKETS[index]
        assert trial.lengths == list(bracket.rung_lengths[: len(trial.lengths)])
        assert trial.closed
    assert per_bracket == [363, 112, 37]
    assert run.max_running == {0: 6, 1: 5, 2: 5}
    # The trial of the best quality wins every rung it reaches, so it is the best at max_length.
    best = min(run.trials.values(), key=lambda trial: sim.quality(trial.hparams))
    assert best.lengths[-1] == 6400
    finals = [(metric, trial) for trial in run.trials.values() for length, metric in trial.metrics if length == 6400]
    assert min(finals, key=lambda pair: pair[0])[1] is best
    assert sum(1 for trial in run.trials.values() if trial.lengths[-1] == 6400) < 512 // 4


def losses(run, event, smaller_is_better):
    if event.kind == "exited":
        return math.inf
    return math.inf if math.isnan(event.metric) else (event.metric if smaller_is_better else -event.metric)


def check_stopping_rule(run, config):
    """Replays the run: a trial goes on from a rung iff its rank is below max(floor(n / d), 1)."""
    searcher = config.searcher
    brackets = searcher.asha_brackets()
    rungs = {}
    decisions = 0
    for event, ops in run.records[1:]:
        if event.kind == "closed":
            continue
        trial = run.trials[event.request_id]
        lengths = brackets[bracket_of(config)(None, trial)].rung_lengths
        length = event.length if event.kind == "validation" else trial.lengths[-1]
        rung = lengths.index(length)
        entries = rungs.setdefault((lengths[0], rung), [])
        loss = losses(run, event, searcher.smaller_is_better)
        rank = bisect.bisect_left(entries, loss)  # ties favour the newcomer
        entries.insert(rank, loss)
        if event.kind == "exited":
            continue
        if rung == len(lengths) - 1:
            assert ids(ops)[0] == ("Close", event.request_id)
            continue
        goes_on = rank < max(math.floor(len(entries) / searcher.divisor), 1)
        expected = ValidateAfter(event.request_id, lengths[rung + 1]) if goes_on else Close(event.request_id)
        assert ops[0] == expected, f"{event}: rank {rank} of {len(entries)}"
        decisions += 1
    return decisions


def check_promotion_rule(run, config):
    """Replays the run: after each arrival at a rung, exactly its new top max(floor(n / d), 1) is promoted."""
    searcher = config.searcher
    brackets = searcher.asha_brackets()
    rungs, promoted, dead, waiting, arrivals, promotions = {}, set(), set(), set(), 0, 0
    for event, ops in run.records[1:]:
        waiting -= {op.request_id for op in ops if not isinstance(op, Shutdown)}
        if event.kind == "closed":
            continue
        if event.request_id in waiting:
            # Canceled while waiting: its entry stands, it just can never be promoted.
            assert event.kind == "exited" and not ops
            dead.add(event.request_id)
            continue
        trial = run.trials[event.request_id]
        lengths = brackets[bracket_of(config)(None, trial)].rung_lengths
        length = event.length if event.kind == "validation" else trial.lengths[-1]
        rung = lengths.index(length)
        arrivals += 1
        if event.kind == "exited":
            dead.add(event.request_id)
        entries = rungs.setdefault((lengths[0], rung), [])
        bisect.insort(entries, (losses(run, event, searcher.smaller_is_better), -arrivals, event.request_id))
        created = {op.request_id for op in ops if isinstance(op, Create)}
        answered = {(op.request_id, op.length) for op in ops if isinstance(op, ValidateAfter)}
        answered -= {(request_id, lengths[0]) for request_id in created}
        if event.kind == "validation" and event.request_id not in {op.request_id for op in ops}:
            waiting.add(event.request_id)
        if rung == len(lengths) - 1:
            assert not answered
            continue
        expected = set()
        for _, _, request_id in entries[: max(math.floor(len(entries) / searcher.divisor), 1)]:
            if (rung, request_id) not in promoted:
                promoted.add((rung, request_id))
                if request_id not in dead:
                    expected.add((request_id, lengths[rung + 1]))
        assert answered == expected, f"{event}"
        promotions += len(expected)
    return promotions


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_stopping_based_continues_exactly_the_top_of_each_rung(sim, smaller_is_better):
    config = sim.make_config({**WORKED_EXAMPLE, "max_trials": 200, "smaller_is_better": smaller_is_better})
    sign = 1 if smaller_is_better else -1
    run = sim.simulate(config, order=5, metric=lambda hparams, length: sign * sim.loss_curve(hparams, length))
    assert check_stopping_rule(run, config) > 150


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_promotion_based_promotes_exactly_the_top_of_each_rung(sim, smaller_is_better):
    config = sim.make_config(
        {**WORKED_EXAMPLE, "max_trials": 200, "stop_once": False, "smaller_is_better": smaller_is_better}
    )
    sign = 1 if smaller_is_better else -1
    run = sim.simulate(config, order=5, metric=lambda hparams, length: sign * sim.loss_curve(hparams, length))
    assert check_promotion_rule(run, config) > 40
    assert all(trial.closed for trial in run.trials.values())


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_larger_is_better_mirrors_smaller_is_better(sim, stop_once):
    def run(smaller_is_better):
        section = {**WORKED_EXAMPLE, "max_trials": 100, "stop_once": stop_once, "smaller_is_better": smaller_is_better}
        sign = 1 if smaller_is_better else -1
        return sim.simulate(sim.make_config(section), order=2, metric=lambda h, n: sign * sim.loss_curve(h, n))

    assert [ops for _, ops in run(True).records] == [ops for _, ops in run(False).records]


def test_stopping_based_by_hand(sim):
    method = make_search_method(sim.make_config(SMALL, max_length=16))
    assert [op.request_id for op in method.initial_operations()] == [0, 0]
    script = [
        (("validation", 0, 0.5, 4), [ValidateAfter(0, 8)]),  # alone at the rung: continues
        (("validation", 0, 0.5, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, 0.5, 16), [Close(0)]),  # the top rung
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("validation", 1, 0.4, 4), [ValidateAfter(1, 8)]),  # rank 0 of 2
        (("validation", 1, 0.4, 8), [ValidateAfter(1, 16)]),
        (("validation", 1, 0.4, 16), [Close(1)]),
        (("closed", 1), ["create 2", ValidateAfter(2, 4)]),
        (("validation", 2, 0.6, 4), [Close(2)]),  # rank 2 of 3: only the top 1 goes on
        (("closed", 2), ["create 3", ValidateAfter(3, 4)]),
        (("validation", 3, 0.45, 4), [ValidateAfter(3, 8)]),  # rank 1 of 4: the top 2 go on
        (("validation", 3, 0.45, 8), [Close(3)]),  # rank 1 of 3
        (("closed", 3), [Shutdown(failure=False)]),
    ]
    drive_with_creates(method, script)


def drive_with_creates(method, script):
    """Like drive(), with "create N" standing for whatever Create of trial N the method made."""
    for event, expected in script:
        kind, request_id, *args = event
        calls = {
            "validation": method.on_validation_completed,
            "closed": method.on_trial_closed,
            "exited": method.on_trial_exited_early,
        }
        ops = calls[kind](request_id, *args)
        shown = [f"create {op.request_id}" if isinstance(op, Create) else op for op in ops]
        assert shown == expected, f"after {event}"


def test_promotion_based_by_hand(sim):
    method = make_search_method(sim.make_config({**SMALL, "stop_once": False}, max_length=16))
    assert [op.request_id for op in method.initial_operations()] == [0, 0]
    script = [
        (("validation", 0, 0.5, 4), [ValidateAfter(0, 8)]),  # alone at the rung: promoted at once
        (("validation", 0, 0.5, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, 0.5, 16), [Close(0)]),
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("validation", 1, 0.6, 4), ["create 2", ValidateAfter(2, 4)]),  # not in the top 1 of 2: waits, slot freed
        (("validation", 2, 0.7, 4), ["create 3", ValidateAfter(3, 4)]),  # waits too
        # The 4th arrival makes the top 2: trial 1 is promoted; no trial can reach rung 0 any more,
        # so the trials still waiting there are closed.
        (("validation", 3, 0.8, 4), [ValidateAfter(1, 8), Close(2), Close(3)]),
        (("closed", 2), []),
        (("closed", 3), []),
        (("validation", 1, 0.6, 8), [Close(1)]),  # second of 2 at rung 1, and no one else can come
        (("closed", 1), [Shutdown(failure=False)]),
    ]
    drive_with_creates(method, script)


def test_ties_favour_the_newcomer(sim):
    method = make_search_method(sim.make_config(SMALL, max_length=16))
    method.initial_operations()
    script = [
        (("validation", 0, 0.5, 4), [ValidateAfter(0, 8)]),
        (("validation", 0, 0.5, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, 0.5, 16), [Close(0)]),
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("validation", 1, 0.5, 4), [ValidateAfter(1, 8)]),  # ties with trial 0, ranks first of 2
        (("validation", 1, 0.5, 8), [ValidateAfter(1, 16)]),
    ]
    drive_with_creates(method, script)
    promotion = make_search_method(sim.make_config({**SMALL, "stop_once": False}, max_length=16))
    promotion.initial_operations()
    script = [
        (("validation", 0, 0.5, 4), [ValidateAfter(0, 8)]),
        (("validation", 0, 0.5, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, 0.5, 16), [Close(0)]),
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("validation", 1, 0.5, 4), [ValidateAfter(1, 8)]),  # the top 1 of 2 is the newcomer: promoted
    ]
    drive_with_creates(promotion, script)


def test_nan_is_the_worst_value(sim):
    method = make_search_method(sim.make_config(SMALL, max_length=16))
    method.initial_operations()
    nan = float("nan")
    script = [
        (("validation", 0, nan, 4), [ValidateAfter(0, 8)]),  # alone: rank 0 of 1 even so
        (("validation", 0, nan, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, nan, 16), [Close(0)]),
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("validation", 1, 0.9, 4), [ValidateAfter(1, 8)]),  # ranks above NaN
        (("exited", 1, ExitedReason.ERRORED), ["create 2", ValidateAfter(2, 4)]),
        (("validation", 2, nan, 4), [Close(2)]),  # rank 1 of 3
        (("closed", 2), ["create 3", ValidateAfter(3, 4)]),
        (("validation", 3, 5.0, 4), [ValidateAfter(3, 8)]),  # rank 1 of 4: above both NaNs
        # Rung 1 holds NaN and trial 1's exit (both worst): 5.0 ranks first of 3.
        (("validation", 3, 5.0, 8), [ValidateAfter(3, 16)]),
        (("validation", 3, 5.0, 16), [Close(3)]),
        (("closed", 3), [Shutdown(failure=False)]),
    ]
    drive_with_creates(method, script)


def test_an_exit_counts_as_the_worst_value_at_its_rung(sim):
    method = make_search_method(sim.make_config(SMALL, max_length=16))
    method.initial_operations()
    script = [
        (("validation", 0, 0.5, 4), [ValidateAfter(0, 8)]),
        (("validation", 0, 0.5, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, 0.5, 16), [Close(0)]),
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("exited", 1, ExitedReason.ERRORED), ["create 2", ValidateAfter(2, 4)]),  # counts toward max_trials
        (("validation", 2, 0.7, 4), [Close(2)]),  # rank 1 of 3
        (("closed", 2), ["create 3", ValidateAfter(3, 4)]),
        # Rank 1 of 4 (0.5, 0.6, 0.7, exit): the exit makes the 4th entry, so the top 2 go on.
        (("validation", 3, 0.6, 4), [ValidateAfter(3, 8)]),
        (("exited", 3, ExitedReason.INVALID_HP), [Shutdown(failure=False)]),  # not replaced
    ]
    drive_with_creates(method, script)


def test_a_waiting_trial_that_exits_is_never_promoted(sim):
    method = make_search_method(sim.make_config({**SMALL, "stop_once": False}, max_length=16))
    method.initial_operations()
    script = [
        (("validation", 0, 0.5, 4), [ValidateAfter(0, 8)]),
        (("validation", 0, 0.5, 8), [ValidateAfter(0, 16)]),
        (("validation", 0, 0.5, 16), [Close(0)]),
        (("closed", 0), ["create 1", ValidateAfter(1, 4)]),
        (("validation", 1, 0.6, 4), ["create 2", ValidateAfter(2, 4)]),  # waits
        (("exited", 1, ExitedReason.USER_CANCELED), []),  # canceled while waiting: held no slot
        (("validation", 2, 0.7, 4), ["create 3", ValidateAfter(3, 4)]),
        # The top 2 are trials 0 and 1, but trial 1 is gone: nobody is promoted; rung 0 is final.
        (("validation", 3, 0.8, 4), [Close(2), Close(3)]),
        (("closed", 2), []),
        (("closed", 3), [Shutdown(failure=False)]),
    ]
    drive_with_creates(method, script)


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_every_trial_failing_fails_the_search(sim, stop_once):
    config = sim.make_config({**WORKED_EXAMPLE, "max_trials": 30, "stop_once": stop_once})
    run = sim.simulate(config, exit_at=lambda *_: ExitedReason.ERRORED)
    assert len(run.trials) == 30
    assert run.shutdown == Shutdown(failure=True)


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_early_exits_mid_search(sim, stop_once):
    config = sim.make_config({**WORKED_EXAMPLE, "max_trials": 120, "stop_once": stop_once})

    def exit_at(request_id, hparams, length):
        return ExitedReason.ERRORED if request_id % 7 == 3 and length >= 400 else None

    cancel = (lambda request_id: request_id % 11 == 4) if not stop_once else (lambda _: False)
    run = sim.simulate(config, order=4, exit_at=exit_at, group=bracket_of(config), cancel_waiting=cancel)
    assert len(run.trials) == 120
    assert run.shutdown == Shutdown(failure=False)
    assert any(trial.exited is ExitedReason.ERRORED for trial in run.trials.values())
    assert stop_once or any(trial.exited is ExitedReason.USER_CANCELED for trial in run.trials.values())
    check = check_stopping_rule if stop_once else check_promotion_rule
    check(run, config)


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_progress_grows_to_one(sim, stop_once):
    config = sim.make_config({**WORKED_EXAMPLE, "max_trials": 40, "stop_once": stop_once})
    method = make_search_method(config)
    method.initial_operations()
    seen = [method.progress()]
    for event in sim.simulate(config).events:
        sim.apply(method, event)
        seen.append(method.progress())
    assert seen == sorted(seen)
    assert seen[0] == 0.0 and seen[-1] == 1.0 and len(set(seen)) > 20


def test_unlimited_concurrency_starts_every_trial(sim):
    method = make_search_method(sim.make_config({**WORKED_EXAMPLE, "max_concurrent_trials": 0}))
    assert sum(isinstance(op, Create) for op in method.initial_operations()) == 512


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.on_validation_completed(0, 1.0, 8), r"asked to validate after 4\. Received a validation after: 8"),
        (lambda m: m.on_validation_completed(1, 1.0, 4), "Trial 1 of the adaptive_asha search was never created"),
        (lambda m: m.on_trial_closed(0), r"Trial 0 of the adaptive_asha search \(bracket 0\) is running, not closing"),
    ],
)
def test_events_the_search_cannot_be_in(sim, call, message):
    method = make_search_method(sim.make_config(SMALL, max_length=16))
    method.initial_operations()
    with pytest.raises(SearcherError, match=message):
        call(method)
