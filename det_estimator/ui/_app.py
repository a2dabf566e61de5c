"""The web app: a few Starlette routes over the store, pages rendered on the server with Jinja2.

Every route reads the store through its read API, with a connection opened for the
request (SQLite serves the thread that opened it, and Starlette runs each page in a
thread of its pool). Pages refresh themselves by fetching their own URL again and
swapping the parts marked ``data-live``; charts fetch their data as JSON.
"""

import collections
import datetime
import json
import logging
import math
import os
import secrets
import sqlite3
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from det_estimator import orchestration
from det_estimator.errors import DetEstimatorError
from det_estimator.store import (
    ExperimentStore,
    LogOwner,
    NoStoreError,
    State,
    StoreError,
    StoreLocation,
    StoreUnusableError,
    UnknownIdError,
    to_json_value,
)
from det_estimator.ui import _views as views
from det_estimator.ui._access import TOKEN_COOKIE, TOKEN_FIELD, TOKEN_HEADER, Access

_log = logging.getLogger("det_estimator.ui")
_HERE = Path(__file__).parent
# Everything the server sends from disk, by the name in its URL: no part of a request's
# path ever becomes part of a file's path.
_STATIC = {
    "ui.js": (_HERE / "static" / "ui.js", "text/javascript"),
    "ui.css": (_HERE / "static" / "ui.css", "text/css"),
}
# Plotly's scripts need eval (its WebGL charts compile their shaders' code) and inline
# styles; everything else comes from this server only.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# How long a resume started from the page is watched for an early refusal.
_RESUME_WATCH_SECONDS = 3.0


def plotly_js_path() -> Path:
    """The ``plotly.min.js`` that Plotly's Python package ships: served as it is, so no page needs the internet."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class StoreMissingError(DetEstimatorError):
    """There is no store at the path the server was given (yet)."""


@dataclass(frozen=True)
class Settings:
    """What the app serves, and to whom.

    Attributes:
        store_path: the store: its database file (it may not exist yet: the pages say so), or
            a PostgreSQL database.
        access: the address rule and the token.
        refresh_seconds: how often the pages fetch their data again.
    """

    store_path: Union[Path, StoreLocation]
    access: Access
    refresh_seconds: float = 3.0

    @property
    def location(self) -> StoreLocation:
        """The store, wherever it is."""
        if isinstance(self.store_path, StoreLocation):
            return self.store_path
        return StoreLocation(path=self.store_path)


def create_app(settings: Settings) -> Starlette:
    """The ASGI app serving the store's pages (run it with uvicorn: :func:`det_estimator.ui.serve`)."""
    pages = _Pages(settings)
    routes = [
        Route("/", pages.experiments),
        Route("/experiments/{experiment_id:int}", pages.experiment),
        Route("/experiments/{experiment_id:int}/charts", pages.charts),
        Route("/experiments/{experiment_id:int}/pause", pages.pause, methods=["POST"]),
        Route("/experiments/{experiment_id:int}/resume", pages.resume, methods=["POST"]),
        Route("/trials/{trial_id:int}", pages.trial),
        Route("/trials/{trial_id:int}/log", pages.log),
        Route("/static/plotly.min.js", pages.plotly_js),
        # Browsers ask for it on every page; there is none.
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/static/{name:str}", pages.static),
    ]
    templates = _templates()

    async def unexpected(request: Request, error: Exception) -> Response:
        _log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        message = f"The page could not be made: {type(error).__name__}: {error}. The server's output has the details."
        return _error_page(templates, 500, "Error", message)

    return Starlette(
        routes=routes,
        middleware=[Middleware(_AccessMiddleware, settings=settings)],
        exception_handlers={Exception: unexpected},
    )


class _AccessMiddleware(BaseHTTPMiddleware):
    """The Host and token checks of every request, and the security headers of every answer."""

    def __init__(self, app: Any, settings: Settings) -> None:
        super().__init__(app)
        self._access = settings.access
        self._templates = _templates()

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await self._check(request, call_next)
        for name, value in _SECURITY_HEADERS.items():
            # Plotly's script keeps its own Cache-Control: 4.8 MB are not fetched again on every page.
            response.headers.setdefault(name, value)
        return response

    async def _check(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        access = self._access
        if not access.host_allowed(request.headers.get("host")):
            return _error_page(self._templates, 400, "Unknown host", _FOREIGN_HOST)
        given = request.query_params.get(TOKEN_FIELD) or request.cookies.get(TOKEN_COOKIE)
        given = given or request.headers.get(TOKEN_HEADER)
        if not access.may_read(given):
            return _error_page(self._templates, 401, "Token needed", _TOKEN_NEEDED)
        if not access.loopback and access.matches(request.query_params.get(TOKEN_FIELD)):
            # Kept in a cookie, and taken out of the address bar (and so of its history).
            query = [(key, value) for key, value in request.query_params.multi_items() if key != TOKEN_FIELD]
            target = request.url.path + (f"?{urllib.parse.urlencode(query)}" if query else "")
            redirect = RedirectResponse(target, status_code=303)
            redirect.set_cookie(TOKEN_COOKIE, access.token, httponly=True, samesite="strict")
            return redirect
        return await call_next(request)


_FOREIGN_HOST = (
    "This server listens on a loopback address, and answers only to localhost, 127.0.0.1 and [::1]: a request "
    "naming another host came from a page of another site. Open it as http://127.0.0.1:PORT/."
)
_TOKEN_NEEDED = (
    "This server listens on an address other machines reach, so every page needs its token. Open the address "
    "`det-estimator ui` printed when it started (it ends in ?token=...), or add ?token=TOKEN to this one."
)


class _Pages:
    """The routes' endpoints."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._templates = _templates()
        # What the last actions said, shown once on the page they return to (by a key in its URL).
        self._notices: collections.OrderedDict[str, tuple[str, bool]] = collections.OrderedDict()

    # Pages.

    def experiments(self, request: Request) -> Response:
        state = request.query_params.get("state", "")
        name = request.query_params.get("name", "")

        def render(store: ExperimentStore) -> Response:
            rows = views.experiment_rows(store, state if state in views.STATES else "", name)
            return self._render("experiments.html", rows=rows, states=views.STATES, state=state, name=name)

        return self._with_store(render)

    def experiment(self, request: Request) -> Response:
        experiment_id = request.path_params["experiment_id"]
        sort = request.query_params.get("sort", "")
        descending = request.query_params.get("desc") == "1"

        def render(store: ExperimentStore) -> Response:
            page = views.experiment_page(store, experiment_id, sort, descending if sort else None)
            return self._render(
                "experiment.html",
                page=page,
                sort=sort or "best",
                descending=descending if sort else not page.experiment.smaller_is_better,
                notice=self._notice(request),
                token=self._settings.access.token,
                State=State,
            )

        return self._with_store(render)

    def trial(self, request: Request) -> Response:
        def render(store: ExperimentStore) -> Response:
            page = views.trial_page(store, request.path_params["trial_id"])
            return self._render("trial.html", page=page, log=store.read_log(LogOwner.trial(page.trial.id)))

        return self._with_store(render)

    # Data for the pages' scripts.

    def charts(self, request: Request) -> Response:
        experiment_id = request.path_params["experiment_id"]
        return self._with_store(lambda store: _json(views.experiment_charts(store, experiment_id)), as_json=True)

    def log(self, request: Request) -> Response:
        offset = _int_or_none(request.query_params.get("offset"))

        def answer(store: ExperimentStore) -> Response:
            trial = store.trial(request.path_params["trial_id"])
            chunk = store.read_log(LogOwner.trial(trial.id), offset)
            return _json({**to_json_value(chunk), "running": trial.state == State.ACTIVE})

        return self._with_store(answer, as_json=True)

    # Actions: POSTs carrying the token in their form.

    async def pause(self, request: Request) -> Response:
        return await self._act(request, self._pause)

    async def resume(self, request: Request) -> Response:
        return await self._act(request, self._resume)

    async def _act(self, request: Request, action: Callable[[ExperimentStore, int], str]) -> Response:
        form = urllib.parse.parse_qs((await request.body()).decode("utf-8", errors="replace"))
        if not self._settings.access.matches(next(iter(form.get(TOKEN_FIELD, [])), None)):
            return _error_page(self._templates, 403, "Token needed", "An action must carry the page's token.")
        experiment_id = request.path_params["experiment_id"]

        def act(store: ExperimentStore) -> Response:
            try:
                notice = (action(store, experiment_id), False)
            except orchestration.ActionRefusedError as refused:
                notice = (str(refused), True)
            key = self._remember(notice)
            return RedirectResponse(f"/experiments/{experiment_id}?notice={key}", status_code=303)

        return await run_in_threadpool(self._with_store, act)

    @staticmethod
    def _pause(store: ExperimentStore, experiment_id: int) -> str:
        orchestration.request_pause(store, experiment_id)
        return f"Pausing experiment {experiment_id}: it finishes its batch and writes a checkpoint."

    @staticmethod
    def _resume(store: ExperimentStore, experiment_id: int) -> str:
        """Runs ``det-estimator experiment resume`` in a process of its own, which goes on after the server stops."""
        orchestration.check_resumable(store.experiment(experiment_id), orchestration.command_on(store.location))
        output = store.files_dir / "experiments" / str(experiment_id) / "resumed-from-ui.log"
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "ab") as log:
            process = subprocess.Popen(
                orchestration.resume_command(store.location, experiment_id),
                env={**os.environ, **store.location.environment()},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            status = process.wait(_RESUME_WATCH_SECONDS)
        except subprocess.TimeoutExpired:
            return f"Resuming experiment {experiment_id} from its latest checkpoint (its output goes to {output})."
        said = output.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        if status != 0:
            raise orchestration.ActionRefusedError(" ".join(said) or f"The resume exited with status {status}.")
        return " ".join(said) or f"Experiment {experiment_id} resumed and ended."

    def _remember(self, notice: tuple[str, bool]) -> str:
        key = secrets.token_urlsafe(8)
        self._notices[key] = notice
        while len(self._notices) > 100:
            self._notices.popitem(last=False)
        return key

    def _notice(self, request: Request) -> Optional[tuple[str, bool]]:
        return self._notices.get(request.query_params.get("notice", ""))

    # Files.

    def plotly_js(self, request: Request) -> Response:
        return FileResponse(plotly_js_path(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    def static(self, request: Request) -> Response:
        found = _STATIC.get(request.path_params["name"])
        if found is None:
            return _error_page(self._templates, 404, "Not found", "There is no such file.")
        return FileResponse(found[0], media_type=found[1])

    # The store, and what its errors show.

    def _with_store(self, answer: Callable[[ExperimentStore], Response], as_json: bool = False) -> Response:
        """``answer(store)``, with the store opened for this request; a page (or JSON) saying what is wrong if it fails.

        A missing, empty or damaged store, an id it does not hold: each gives its own
        answer, never a traceback.
        """
        location = self._settings.location

        def error(status: int, title: str, message: str) -> Response:
            if as_json:
                return JSONResponse({"error": message}, status_code=status)
            return _error_page(self._templates, status, title, message)

        try:
            store = _open_store(location)
        except StoreMissingError as missing:
            return error(503, "No store", str(missing))
        except StoreUnusableError as unusable:
            return error(503, "Store unusable", str(unusable))
        try:
            return answer(store)
        except UnknownIdError as unknown:
            return error(404, "Not found", str(unknown))
        except StoreError as failure:
            # A damaged store, or a database that stopped answering: the store's own errors say which.
            return error(503, "Store unusable", str(failure))
        except sqlite3.Error as failure:
            return error(503, "Store unusable", f"The store {location} cannot be read: {failure}.")
        finally:
            store.close()

    def _render(self, template: str, **context: Any) -> HTMLResponse:
        context.setdefault("refresh_seconds", self._settings.refresh_seconds)
        context.setdefault("store_path", str(self._settings.location))
        return HTMLResponse(self._templates.get_template(template).render(**context))


def _open_store(location: StoreLocation) -> ExperimentStore:
    """The store at ``location``, never made there: a page over a path (or a database) with no store says so."""
    if location.path is None:
        try:
            return ExperimentStore(location, create=False)
        except NoStoreError as missing:
            raise StoreMissingError(f"{missing} This page shows it once it exists.") from None
    path = location.path
    if not path.exists():
        raise StoreMissingError(
            f"There is no experiment store at {path} yet. `det-estimator --store {path} experiment create ...` makes "
            "one; this page shows it once it exists."
        )
    if path.is_file() and path.stat().st_size == 0:
        raise StoreMissingError(f"The store {path} is an empty file, not a store det-estimator made.")
    return ExperimentStore(path)


def _templates() -> jinja2.Environment:
    """The pages' templates; every value they print is escaped unless a template says otherwise (none does)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters.update(when=_when, duration=_duration, number=_number_text, size=_size, query=_query)
    return environment


def _error_page(templates: jinja2.Environment, status: int, title: str, message: str) -> HTMLResponse:
    html = templates.get_template("error.html").render(title=title, message=message, refresh_seconds=0, store_path="")
    return HTMLResponse(html, status_code=status)


def _json(data: Any) -> Response:
    """``data`` as JSON; NaN and infinities, which JSON lacks, as null (the charts' data has none: the fast way)."""
    try:
        body = json.dumps(data, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        body = json.dumps(to_json_value(data), separators=(",", ":"))
    return Response(body, media_type="application/json")


def _int_or_none(text: Optional[str]) -> Optional[int]:
    try:
        return max(int(text), 0) if text is not None else None
    except ValueError:
        return None


def _when(timestamp: Optional[float]) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: Optional[float]) -> str:
    if seconds is None or seconds < 0:
        return "-"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def _number_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _size(size: Optional[int]) -> str:
    return "-" if size is None else orchestration.format_size(size)


def _query(pairs: dict[str, Union[str, int]]) -> str:
    """A query string of ``pairs``, each value quoted (a column named by a user may hold any character)."""
    return urllib.parse.urlencode({key: str(value) for key, value in pairs.items()})
