"""More slots than CPUs get a warning and run; more than the memory holds are refused."""

import pytest

from det_estimator.cli import _experiments
from det_estimator.cli._experiments import UsageError


@pytest.fixture
def two_cpus_and_8_gb(monkeypatch):
    monkeypatch.setattr(_experiments, "_cpus", lambda: 2)
    monkeypatch.setattr(_experiments, "_memory_bytes", lambda: 8 * 2**30)


def test_more_slots_than_cpus_are_warned_of_and_allowed(two_cpus_and_8_gb, capsys):
    _experiments.check_slots_fit_this_machine(3, "resources.slots_per_trial")
    assert "warning: 3 slots on 2 CPUs" in capsys.readouterr().err


def test_as_many_slots_as_cpus_say_nothing(two_cpus_and_8_gb, capsys):
    _experiments.check_slots_fit_this_machine(2, "resources.slots_per_trial")
    assert capsys.readouterr().err == ""


def test_more_slots_than_the_memory_holds_are_refused_with_the_most_it_holds(two_cpus_and_8_gb):
    _experiments.check_slots_fit_this_machine(16, "resources.slots_per_trial")  # 16 x 0.5 GB fit in 8 GB
    with pytest.raises(UsageError, match=r"17 slots asked for, but this machine's 8 GB of memory holds at most 16"):
        _experiments.check_slots_fit_this_machine(17, "resources.slots_per_trial")
