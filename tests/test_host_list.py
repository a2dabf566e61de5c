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


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a", "the entry 'a' gives no slot count (write a:N)"),
        ("a:2,b", "the entry 'b' gives no slot count (write b:N)"),
        ("a:0", "'a:0' gives a 0 slots; a host listed needs at least 1"),
        ("a:x", "the slot count of 'a:x' is not a whole number"),
        (":2", "the entry ':2' names no host"),
        ("a:2,,b:1", "an empty entry"),
    ],
)
def test_the_command_wants_every_host_with_its_slots_and_says_which_entry_is_wrong(text, problem):
    with pytest.raises(ValueError, match="host:slots entries") as raised:
        parse_hosts(text, require_slots=True)
    assert str(raised.value).endswith(f"not {text!r}: {problem}")


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
    assert "must be host:slots entries separated by commas, not 'a:0': 'a:0' gives a 0 slots" in said.getvalue()


def test_the_store_keeps_the_entries(tmp_path):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        there = store.create_experiment("e", {}, "/c", "m:T", 3, False, hosts=parse_hosts("a:2,b:1"))
        here = store.create_experiment("e", {}, "/c", "m:T", 3, False)
        assert store.experiment(there).hosts == (HostSlots("a", 2), HostSlots("b", 1))
        assert store.experiment(here).hosts is None
