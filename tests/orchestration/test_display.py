"""The live display of several trials: each bar keeps a line of its own, and text never starts mid-line."""

import fcntl
import io
import os
import re
import struct
import termios
from typing import Optional

from det_estimator.orchestration._display import BarDisplay, PlainDisplay
from det_estimator.orchestration._follow import MetricsReported, Progress, StoreFollower, TrialEnded, TrialStarted
from det_estimator.store import ExperimentStore, MetricKind, State


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


def screen(output: str, columns: Optional[int] = None) -> list[str]:
    """The lines a terminal shows for ``output``: text, carriage returns, newlines and cursor-up (tqdm's moves).

    Also erasing to the end of the line, and, on a terminal ``columns`` wide, text that
    wraps past the last column.
    """
    lines: list[list[str]] = [[]]
    row = column = 0
    i = 0
    while i < len(output):
        if output.startswith("\x1b[A", i):
            row, i = max(row - 1, 0), i + 3
            continue
        if output.startswith("\x1b[K", i):
            del lines[row][column:]
            i += 3
            continue
        char = output[i]
        i += 1
        if char == "\r":
            column = 0
        elif char == "\n":  # a terminal's output mode adds the carriage return
            row, column = row + 1, 0
            while len(lines) <= row:
                lines.append([])
        else:
            if columns is not None and column == columns:  # past the last column: on the next line
                row, column = row + 1, 0
                while len(lines) <= row:
                    lines.append([])
            line = lines[row]
            line.extend(" " * (column + 1 - len(line)))
            line[column] = char
            column += 1
    return ["".join(line).rstrip() for line in lines]


def test_what_is_written_after_the_last_bar_closes_begins_its_own_line():
    stream = io.StringIO()
    display = BarDisplay(stream, multi_trial=True)
    for trial_id in (1, 2):
        display.show(TrialStarted(trial_id, 0, 100, 0.0))
    for trial_id in (1, 2):
        display.show(MetricsReported(trial_id, MetricKind.TRAINING, 50, {"loss": 0.5, "auc": 0.75}, 1.0))
    for trial_id in (1, 2):  # the second bar is not on the first line when it closes
        display.show(TrialEnded(trial_id, State.COMPLETED, 2.0, batches=100))
    display.message("Experiment 1 COMPLETED")
    display.close()
    shown = [line for line in screen(stream.getvalue()) if line.strip()]
    assert shown == [
        "trial 1: done after 100 batches",
        "trial 2: done after 100 batches",
        "Experiment 1 COMPLETED",
    ]


def test_a_report_towards_a_new_length_is_shown_with_that_length(tmp_path):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("search", {}, str(tmp_path), "python3 train.py", 1, False)
        trial_id = store.create_trial(experiment_id, {}, 1, tmp_path / "checkpoints", max_batches=8)
        follower = StoreFollower(store, experiment_id, since=0.0)
        run_id = store.start_run(trial_id)
        store.set_progress(trial_id, 8, 8)
        stream = io.StringIO()
        display = PlainDisplay(stream)
        for event in follower.poll():
            display.show(event)
        # Between two looks: the search gives the trial a longer length, and it trains towards it.
        store.set_progress(trial_id, 8, 16)
        store.record_metrics(trial_id, MetricKind.TRAINING, 10, {"loss": 0.5}, run_id)
        store.set_progress(trial_id, 10)
        for event in follower.poll():
            display.show(event)
    assert "batches 10/16 (62%)" in stream.getvalue(), stream.getvalue()


def test_a_bar_shows_the_training_loss_not_every_summary_beside_it():
    stream = io.StringIO()
    display = BarDisplay(stream)
    display.show(TrialStarted(1, 0, 449, 0.0))
    # What a premade DNNClassifier reports: a summary per layer beside the loss.
    metrics = {
        "average_loss": 0.0311514,
        "dnn/dnn/hiddenlayer_0/fraction_of_zero_values": 0.532227,
        "dnn/dnn/logits/fraction_of_zero_values": 0.0,
        "loss": 1.86908,
    }
    display.show(MetricsReported(1, MetricKind.TRAINING, 200, metrics, 1.0))
    bar = screen(stream.getvalue())[-1]
    assert bar.endswith(", loss 1.86908"), bar
    assert "fraction_of_zero_values" not in bar and "average_loss" not in bar, bar
    display.show(MetricsReported(1, MetricKind.TRAINING, 400, {"mse": 0.25}, 2.0))
    assert screen(stream.getvalue())[-1].endswith(", mse 0.25")  # no loss: what there is
    display.close()


def test_a_bar_without_a_length_shows_the_batches_trained_not_a_question_mark():
    # A script that trains to a length of its own reports batches with no length to reach.
    stream = io.StringIO()
    display = BarDisplay(stream)
    display.show(MetricsReported(1, MetricKind.TRAINING, 5, {"loss": 0.5}, 1.0))
    bar = screen(stream.getvalue())[-1]
    assert bar.startswith("batches: 5 [") and bar.endswith(", loss 0.5"), bar
    assert "/?" not in bar and "%" not in bar, bar  # no length (its speed is "?" until a second report)
    display.show(Progress(1, 10, 40, 2.0))  # a length, once known, is shown as usual
    assert "/40 [" in screen(stream.getvalue())[-1] and "%|" in screen(stream.getvalue())[-1]
    display.close()


def test_ctrl_c_echoed_after_the_bar_leaves_no_stale_bar_behind(tmp_path):
    # A terminal 80 columns wide (a pty's), on which the display measures its bar.
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    class Terminal(io.StringIO):
        def fileno(self) -> int:
            return terminal

    stream = Terminal()
    try:
        display = BarDisplay(stream)
        display.show(TrialStarted(1, 0, 20000, 0.0))
        display.show(MetricsReported(1, MetricKind.TRAINING, 6400, {"loss": 0.0596573}, 1.0))
        stream.write("^C")  # what the terminal echoes of Ctrl-C, where the cursor is: after the bar
        display.message("Pausing: the trial finishes its batch and writes a checkpoint...")
        display.show(MetricsReported(1, MetricKind.TRAINING, 6858, {"loss": 0.0583405}, 2.0))
        display.close()
    finally:
        os.close(controller)
        os.close(terminal)
    shown = [line for line in screen(stream.getvalue(), columns=80) if line.strip()]
    assert shown[0] == "Pausing: the trial finishes its batch and writes a checkpoint...", shown
    assert len(shown) == 2 and shown[1].startswith("batches:  34%|") and "6858/20000" in shown[1], shown
    assert all(len(line) <= 78 for line in shown), shown


def test_a_bars_speed_counts_from_the_runs_first_report_not_from_its_start_up():
    stream = io.StringIO()
    display = BarDisplay(stream)
    display.show(TrialStarted(1, 800, 1600, 0.0))  # a resumed run
    bar = display._bars[1]
    bar.start_t -= 5.0  # its processes took 5 s to start and restore the checkpoint
    display.show(Progress(1, 1000, 1600, 5.0))
    bar.start_t -= 1.0  # one second later
    display.show(Progress(1, 1200, 1600, 6.0))
    bar.refresh()
    shown = screen(stream.getvalue())[-1]
    # 200 batches in the second since the first report (from the start-up: 400 in 6 s, 67 batch/s).
    rate = float(re.search(r"([0-9.]+)batch/s", shown).group(1))
    assert 150 < rate < 210, shown
    display.close()
