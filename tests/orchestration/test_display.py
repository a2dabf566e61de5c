"""The live display of several trials: each running trial's bar keeps a line of its own."""

import io

from det_estimator.orchestration._display import BarDisplay
from det_estimator.orchestration._follow import TrialEnded, TrialStarted
from det_estimator.store import State


def bar_lines(display: BarDisplay) -> dict[int, int]:
    """The line each trial's bar is drawn on (tqdm keeps a fixed position as its negative)."""
    return {trial_id: abs(bar.pos) for trial_id, bar in display._bars.items()}


def test_a_new_trial_takes_the_line_a_finished_one_left_not_a_running_ones():
    display = BarDisplay(io.StringIO(), multi_trial=True)
    for trial_id in (1, 2):
        display.show(TrialStarted(trial_id, 0, 100, 0.0))
    assert bar_lines(display) == {1: 0, 2: 1}
    display.show(TrialEnded(1, State.COMPLETED, 1.0, batches=100))
    display.show(TrialStarted(3, 0, 100, 2.0))
    display.show(TrialStarted(4, 0, 100, 2.0))
    assert bar_lines(display) == {2: 1, 3: 0, 4: 2}
    display.close()
