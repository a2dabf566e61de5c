"""The commands a run's summary suggests reach the store the run used."""

import shlex

from det_estimator.orchestration import command_on


def test_the_default_store_is_reached_without_naming_it(tmp_path, monkeypatch):
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("DET_ESTIMATOR_STORE", str(store))
    assert command_on(store) == "det-estimator"


def test_the_default_store_under_xdg_data_home_is_reached_without_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("DET_ESTIMATOR_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert command_on(tmp_path / "det-estimator" / "store.sqlite") == "det-estimator"


def test_another_store_is_named_quoted_for_the_shell(tmp_path, monkeypatch):
    monkeypatch.delenv("DET_ESTIMATOR_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    store = tmp_path / "my runs" / "it's.sqlite"
    # Pasted into a shell, it splits back into the program, the option and the very path.
    assert shlex.split(command_on(store)) == ["det-estimator", "--store", str(store)]
