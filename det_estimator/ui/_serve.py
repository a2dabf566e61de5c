"""Runs the web app with uvicorn on an address, with the token that address needs."""

import os
import sys
from pathlib import Path
from typing import Optional, TextIO, Union

from det_estimator import _environment_variables as environment_variables
from det_estimator.store import StoreLocation, parse_store_location
from det_estimator.ui._access import Access, is_loopback, new_token
from det_estimator.ui._app import Settings, create_app

# A token given through the environment rather than the command line, which other users
# of the machine can read in the process list.
TOKEN_VARIABLE = environment_variables.UI_TOKEN


def serve(
    store_path: Union[Path, str, StoreLocation],
    host: str = "127.0.0.1",
    port: int = 8080,
    token: Optional[str] = None,
    refresh_seconds: float = 3.0,
    out: Optional[TextIO] = None,
) -> int:
    """Serves the store's pages until interrupted; returns the exit status.

    On a loopback address the pages need no token; on any other, every request needs
    one: ``token``, else ``$DET_ESTIMATOR_UI_TOKEN``, else a new one, printed once here
    in the address to open.

    Args:
        store_path: the store: its database file (it may not exist yet: the pages say so), or a
            PostgreSQL database's URL.
        host: the address to listen on.
        port: the port to listen on.
        token: the token requests must carry (at least 16 characters).
        refresh_seconds: how often the pages fetch their data again (0: never).
        out: where the address to open is printed (default: standard output).
    """
    import uvicorn

    out = out or sys.stdout
    loopback = is_loopback(host)
    given = token or os.environ.get(TOKEN_VARIABLE)
    access = Access(token=given or new_token(), loopback=loopback)
    location = parse_store_location(store_path, "The store")
    app = create_app(Settings(location, access, refresh_seconds))
    store_path = location.shown
    shown_host = f"[{host}]" if ":" in host else host
    address = f"http://{shown_host}:{port}/"
    if loopback:
        print(f"Serving the store {store_path} at {address} (Ctrl-C stops it).", file=out, flush=True)
    else:
        # Printed once, and only when this process made it up: a given token stays where it was given.
        shown = address if given else f"{address}?token={access.token}"
        print(
            f"Serving the store {store_path} at {shown} to every machine that reaches {host}; every page needs the "
            "token (Ctrl-C stops it).",
            file=out,
            flush=True,
        )
    uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False)
    return 0
