"""--hosts is parsed once into HostSlots entries, written back as the same text, and kept typed in the store."""

import io
from contextlib import redirect_stderr

import pytest

from det_estimator._host_list import HostSlots, format_hosts, parse_hosts
from det_estimator.cli import build_parser
from det_estimator.launch import _args
from det_estimator.store import ExperimentStore


def test_the_text_and_the_entries_go_both_ways():
    entries = parse_hosts("a:2, b:1,127.0.0.1:3")
    assert entries == [HostSlots("a", 2), HostSlots("b", 1), HostSlots("127.0.0.1", 3)]
    assert format_hosts(entries) == "a:2,b:1,127.0.0.1:3"
    assert parse_hosts(format_hosts(entries)) == entries
    assert [entry.is_local for entry in entries] == [False, False, True]


@pytest.mark.parametrize("text", ["a", "a:2,b", "a:0", "a:x", ":2", "a:2,,b:1"])
def test_the_command_wants_every_host_with_its_slots(text):
    with pytest.raises(ValueError, match="host:slots entries"):
        parse_hosts(text, require_slots=True)


def test_the_command_line_gives_entries():
    args = build_parser().parse_args(["experiment", "create", "c.yaml", ".", "--hosts", "a:2,b:1"])
    assert args.hosts == [HostSlots("a", 2), HostSlots("b", 1)]
    with redirect_stderr(io.StringIO()) as said, pytest.raises(SystemExit):
        build_parser().parse_args(["experiment", "create", "c.yaml", ".", "--hosts", "a"])
    assert "must be host:slots entries separated by commas, not 'a'" in said.getvalue()


def test_the_launchers_give_entries_a_host_alone_having_one_slot():
    args, command = _args.parse("launch", "", ["--hosts", "a:2,b", "--", "python3", "train.py"])
    assert args.hosts == [HostSlots("a", 2), HostSlots("b", 1)] and command == ["python3", "train.py"]
    with redirect_stderr(io.StringIO()) as said, pytest.raises(SystemExit):
        _args.parse("launch", "", ["--hosts", "a:0", "--", "python3", "train.py"])
    assert "must be host:slots entries separated by commas, not 'a:0'" in said.getvalue()


def test_the_store_keeps_the_entries(tmp_path):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        there = store.create_experiment("e", {}, "/c", "m:T", 3, False, hosts=parse_hosts("a:2,b:1"))
        here = store.create_experiment("e", {}, "/c", "m:T", 3, False)
        assert store.experiment(there).hosts == (HostSlots("a", 2), HostSlots("b", 1))
        assert store.experiment(here).hosts is None
