import pytest

from det_estimator.ui import Access, is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.org", ""])
def test_other_addresses_are_not_loopback(host):
    assert not is_loopback(host)


def test_on_loopback_pages_need_no_token_but_actions_do():
    access = Access("t" * 32, loopback=True)
    assert access.may_read(None)
    assert not access.matches(None) and not access.matches("t" * 31) and access.matches("t" * 32)


def test_off_loopback_every_request_needs_the_token():
    access = Access("t" * 32, loopback=False)
    assert not access.may_read(None) and not access.may_read("wrong")
    assert access.may_read("t" * 32)


@pytest.mark.parametrize("header", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost", "127.0.0.1"])
def test_a_loopback_server_answers_to_its_loopback_names(header):
    assert Access("t" * 32, loopback=True).host_allowed(header)


@pytest.mark.parametrize("header", ["evil.example:8080", "evil.example", "", None, "127.0.0.1.evil.example:80"])
def test_a_loopback_server_refuses_other_host_names_as_dns_rebinding(header):
    assert not Access("t" * 32, loopback=True).host_allowed(header)
    assert Access("t" * 32, loopback=False).host_allowed(header)


def test_a_short_token_is_refused():
    with pytest.raises(ValueError, match="at least 16 characters"):
        Access("short", loopback=False)
