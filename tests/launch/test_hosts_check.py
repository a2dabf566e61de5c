"""launcher.check_hosts: a host of ``--hosts`` that horovodrun could not reach is refused before anything runs."""

import os
import socket
from pathlib import Path

import pytest

from det_estimator.launcher import check_hosts, chief_address, parse_hosts, slots_on_this_machine

# An address of TEST-NET-2 (RFC 5737): it is no machine's own, and resolves without DNS.
ELSEWHERE = "198.51.100.7"


def fake_ssh(tmp_path: Path, monkeypatch, status: int, said: str = "") -> Path:
    """An ``ssh`` first on PATH that records its arguments and exits with ``status``; returns the record's path."""
    calls = tmp_path / "ssh_calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    ssh = bin_dir / "ssh"
    ssh.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\necho "{said}" >&2\nexit {status}\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_a_host_whose_name_does_not_resolve_is_named(tmp_path, monkeypatch):
    calls = fake_ssh(tmp_path, monkeypatch, 0)
    with pytest.raises(ValueError, match=r"host 'no-such-host\.invalid' is not known: its name does not resolve"):
        check_hosts(parse_hosts("localhost:1,no-such-host.invalid:1"))
    assert not calls.exists()


def test_a_host_ssh_cannot_reach_is_named_with_what_ssh_said(tmp_path, monkeypatch):
    calls = fake_ssh(tmp_path, monkeypatch, 255, f"ssh: connect to host {ELSEWHERE} port 22: Connection refused")
    with pytest.raises(ValueError) as refused:
        check_hosts(parse_hosts(f"localhost:1,{ELSEWHERE}:2"))
    message = str(refused.value)
    assert f"host '{ELSEWHERE}' cannot be reached over ssh" in message
    assert "Connection refused" in message and "password-less ssh" in message
    assert calls.read_text().split()[-2:] == [ELSEWHERE, "true"]


def test_reachable_hosts_and_this_machine_pass(tmp_path, monkeypatch):
    calls = fake_ssh(tmp_path, monkeypatch, 0)
    check_hosts(parse_hosts(f"localhost:1,{ELSEWHERE}:1,{ELSEWHERE}:1"))
    assert calls.read_text().count(ELSEWHERE) == 1  # once per host

    calls.unlink()
    fake_ssh(tmp_path / "failing", monkeypatch, 255, "unreachable")
    # This machine by the names horovodrun starts processes on without ssh is not reached over ssh.
    here = [f"{address}:1" for address in local_interface_addresses()]
    check_hosts(parse_hosts(",".join(["localhost:1", "127.0.0.1:1", *here])))
    assert not calls.exists() and not (tmp_path / "failing" / "ssh_calls").exists()


def local_interface_addresses() -> list[str]:
    """This machine's interfaces' IPv4 addresses, as horovodrun lists them."""
    import psutil

    return sorted(
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family == socket.AF_INET
    )


def test_another_loopback_address_is_reached_over_ssh_as_horovodrun_does(tmp_path, monkeypatch):
    calls = fake_ssh(tmp_path, monkeypatch, 255, "ssh: connect to host 127.0.0.2 port 22: Connection refused")
    with pytest.raises(ValueError, match=r"host '127\.0\.0\.2' cannot be reached over ssh \(ssh: connect to host"):
        check_hosts(parse_hosts("localhost:1,127.0.0.2:1"))
    assert calls.read_text().split()[-2:] == ["127.0.0.2", "true"]


def test_the_slots_on_this_machine_count_it_under_any_of_its_names():
    (address, *_) = [a for a in local_interface_addresses() if a != "127.0.0.1"] or ["127.0.0.1"]
    hosts = f"localhost:1,127.0.0.1:2,{address}:3,{ELSEWHERE}:4,no-such-host.invalid:5,127.0.0.2:6"
    assert slots_on_this_machine(parse_hosts(hosts)) == 6


def test_the_others_reach_a_chief_on_localhost_at_an_address_of_this_machine_they_can_route_to():
    assert chief_address(None) == "127.0.0.1"
    assert chief_address(parse_hosts("localhost:2")) == "127.0.0.1"
    assert chief_address(parse_hosts(f"{ELSEWHERE}:1,localhost:1")) == ELSEWHERE
    # 127.0.0.1 would be each remote process's own loopback.
    towards = chief_address(parse_hosts(f"localhost:1,{ELSEWHERE}:1"))
    assert towards != "127.0.0.1" and not towards.startswith("127.")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((towards, 0))  # an address of this machine
