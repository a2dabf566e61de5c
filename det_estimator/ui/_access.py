"""Who may read the pages and act on experiments: the address the server listens on, and its token.

On a loopback address only this machine's users reach the server, and the pages need
no token; an action (pause, resume) still does, so that another web site open in the
same browser cannot post one (the token is in the page's forms, which such a site
cannot read). On any other address every request needs it: given once in the URL
(``?token=...``), then kept in a cookie for that address only.
"""

import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from typing import Optional

TOKEN_COOKIE = "det_estimator_ui_token"
TOKEN_FIELD = "token"
TOKEN_HEADER = "x-det-estimator-token"
# Names a browser on this machine reaches a loopback server by; any other Host header
# is a page of another site that resolved its own name to 127.0.0.1 (DNS rebinding).
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable only from this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A token no one guesses: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Access:
    """The server's rule for requests.

    Attributes:
        token: what an action (and, off loopback, any request) must carry.
        loopback: whether the server listens on a loopback address only.
    """

    token: str
    loopback: bool

    def __post_init__(self) -> None:
        if len(self.token) < 16:
            raise ValueError(f"Argument `token` must be at least 16 characters long. Received: {len(self.token)}")

    def matches(self, given: Optional[str]) -> bool:
        """Whether ``given`` is the token (compared in constant time)."""
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def may_read(self, given: Optional[str]) -> bool:
        """Whether a request that carries ``given`` (or None) may read the pages."""
        return self.loopback or self.matches(given)

    def host_allowed(self, host_header: Optional[str]) -> bool:
        """Whether the request's Host header names this server: any, off loopback; a loopback name, on it."""
        if not self.loopback:
            return True
        return bool(host_header) and _host_name(host_header or "").lower() in _LOOPBACK_NAMES


def _host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8080`` -> ``::1``, ``localhost:8080`` -> ``localhost``."""
    if header.startswith("["):
        return header[1 : header.index("]")] if "]" in header else header
    return header.split(":")[0] if header.count(":") == 1 else header
