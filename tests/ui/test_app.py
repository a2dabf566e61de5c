"""The web app through Starlette's test client: escaping, tokens, actions, and a store that is missing or damaged."""

import re

import pytest
from starlette.testclient import TestClient

from det_estimator.store import ExperimentStore, LogOwner, StoreLocation
from det_estimator.ui import Access, Settings, create_app

from .conftest import XSS

TOKEN = "a-token-of-enough-characters-0123"
LOCAL = "http://127.0.0.1:8080"


def client(path, loopback=True, base_url=LOCAL, **settings):
    app = create_app(Settings(path, Access(TOKEN, loopback=loopback), **settings))
    return TestClient(app, base_url=base_url, follow_redirects=False)


def test_every_page_shows_what_a_user_wrote_as_text(filled):
    path, search, _, trials = filled
    web = client(path)
    for url in ("/", f"/experiments/{search}", f"/trials/{trials[2]}"):
        page = web.get(url)
        assert page.status_code == 200, url
        assert "<script>alert" not in page.text, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text, url
        assert "script-src 'self'" in page.headers["content-security-policy"]


def test_the_experiments_page_filters_by_state_and_name(filled):
    path, search, single, _ = filled
    web = client(path)
    ids = lambda page: [int(found) for found in re.findall(r'data-experiment-id="(\d+)"', page.text)]  # noqa: E731
    assert ids(web.get("/")) == [single, search]
    assert ids(web.get("/?state=COMPLETED")) == [search]
    assert ids(web.get("/", params={"name": "single"})) == [single]
    assert "No experiment matches this filter." in web.get("/?name=nothing").text


def test_the_trial_table_sorts_by_any_column(filled):
    path, search, _, trials = filled
    web = client(path)
    order = lambda page: [int(found) for found in re.findall(r'data-trial-id="(\d+)"', page.text)]  # noqa: E731
    assert order(web.get(f"/experiments/{search}")) == [trials[1], trials[2], trials[0]]
    assert order(web.get(f"/experiments/{search}?sort=best&desc=1")) == [trials[0], trials[2], trials[1]]
    assert order(web.get(f"/experiments/{search}", params={"sort": "hp:x", "desc": "0"})) == trials


def test_the_charts_data_carries_every_trial(filled):
    path, search, _, trials = filled
    charts = client(path).get(f"/experiments/{search}/charts").json()
    assert [curve["label"] for curve in charts["curves"]] == ["training loss", f"validation {XSS}", "validation loss"]
    assert charts["parcoords"]["meta"] == trials
    assert charts["best_trial_id"] == trials[1]


def test_pause_is_a_post_that_needs_the_pages_token_and_goes_through_the_store(filled):
    path, _, single, _ = filled
    web = client(path)
    assert web.get(f"/experiments/{single}/pause").status_code == 405
    assert web.post(f"/experiments/{single}/pause").status_code == 403
    assert web.post(f"/experiments/{single}/pause", data={"token": "wrong" * 8}).status_code == 403
    with ExperimentStore(path) as store:
        assert store.experiment(single).pause_requested_at is None
    page = web.get(f"/experiments/{single}")
    assert f'name="token" value="{TOKEN}"' in page.text
    done = web.post(f"/experiments/{single}/pause", data={"token": TOKEN})
    assert done.status_code == 303
    with ExperimentStore(path) as store:
        assert store.experiment(single).pause_requested_at is not None
    shown = web.get(done.headers["location"])
    assert f"Pausing experiment {single}" in shown.text


def test_an_action_the_experiments_state_does_not_allow_says_why(filled):
    path, search, _, _ = filled
    web = client(path)
    for action, message in (("pause", "only an ACTIVE one can be paused"), ("resume", "it has completed")):
        done = web.post(f"/experiments/{search}/{action}", data={"token": TOKEN})
        assert message in web.get(done.headers["location"]).text


def test_off_loopback_every_request_needs_the_token_which_a_cookie_then_carries(filled):
    path, search, _, _ = filled
    web = client(path, loopback=False, base_url="http://192.0.2.1:8080")
    for url in ("/", f"/experiments/{search}", f"/experiments/{search}/charts", "/static/plotly.min.js"):
        refused = web.get(url)
        assert refused.status_code == 401, url
        assert "every page needs its token" in refused.text
    assert web.get("/?token=wrong-token-of-many-characters").status_code == 401
    entered = web.get(f"/experiments/{search}?token={TOKEN}&sort=hp:x")
    assert entered.status_code == 303 and entered.headers["location"] == f"/experiments/{search}?sort=hp%3Ax"
    assert "HttpOnly" in entered.headers["set-cookie"] and "SameSite=strict" in entered.headers["set-cookie"]
    assert web.get(entered.headers["location"]).status_code == 200  # the cookie carries it now


def test_a_loopback_server_refuses_a_page_of_another_site_resolved_to_it(filled):
    path = filled[0]
    assert client(path, base_url="http://evil.example:8080").get("/").status_code == 400
    assert client(path, base_url="http://localhost:8080").get("/").status_code == 200


@pytest.mark.parametrize(
    "url", ["/static/../../../etc/passwd", "/static/..%2F..%2F_app.py", "/static/templates%2Fbase.html", "/etc/passwd"]
)
def test_no_request_path_reaches_a_file(filled, url):
    answer = client(filled[0]).get(url)
    assert answer.status_code == 404
    assert "root:" not in answer.text and "import" not in answer.text


def test_plotly_is_served_from_plotlys_own_package(filled):
    script = client(filled[0]).get("/static/plotly.min.js")
    assert script.status_code == 200 and "plotly.js" in script.text[:200]
    assert script.headers["cache-control"] == "max-age=86400"  # kept, unlike the pages'
    assert client(filled[0]).get("/").headers["cache-control"] == "no-store"


def test_a_missing_store_gives_a_page_saying_so(tmp_path):
    web = client(tmp_path / "nothing.sqlite")
    page = web.get("/")
    assert page.status_code == 503 and "There is no experiment store at" in page.text
    assert not (tmp_path / "nothing.sqlite").exists()
    assert "There is no experiment store" in web.get("/experiments/1/charts").json()["error"]


def test_a_store_that_is_not_a_store_gives_a_page_saying_so(tmp_path):
    path = tmp_path / "store.sqlite"
    path.write_bytes(b"this is not a database, " * 100)
    page = client(path).get("/")
    assert page.status_code == 503 and "Cannot use" in page.text and "Traceback" not in page.text


def test_a_store_damaged_past_its_first_page_gives_a_page_saying_so(filled):
    path, search, _, _ = filled
    data = bytearray(path.read_bytes())
    data[8192:] = b"\xff" * (len(data) - 8192)
    path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    page = client(path).get(f"/experiments/{search}")
    assert page.status_code == 503 and "Traceback" not in page.text


def test_an_unknown_id_is_a_page_not_found(filled):
    web = client(filled[0])
    assert "There is no experiment 99" in web.get("/experiments/99").text
    assert web.get("/trials/99").status_code == 404


def test_the_log_is_read_from_the_store_files_only_and_followed_from_an_offset(filled):
    path, _, _, trials = filled
    with ExperimentStore(path) as store:
        log = store.trial(trials[0]).log_path
    from pathlib import Path

    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(f"first line {XSS}\n")
    web = client(path)
    page = web.get(f"/trials/{trials[0]}")
    assert f"first line {XSS}" not in page.text and "first line &lt;script&gt;" in page.text
    chunk = web.get(f"/trials/{trials[0]}/log").json()
    with open(log, "a") as more:
        more.write("second line\n")
    followed = web.get(f"/trials/{trials[0]}/log", params={"offset": chunk["offset"]}).json()
    assert followed["text"] == "second line\n"


def test_the_trial_page_shows_a_checkpoint_s_size_as_the_command_lists_it(filled, capsys):
    from det_estimator.cli import main

    path, search, _, trials = filled
    with ExperimentStore(path) as store:
        store.record_checkpoint(trials[0], "a-checkpoint", 30, str(path.parent / "ck"), 1_000_000, {})
    assert main(["--store", str(path), "checkpoint", "list", str(search)]) == 0
    listed = capsys.readouterr().out.splitlines()[1].split()
    size = " ".join(listed[listed.index("a-checkpoint") + 6 : listed.index("a-checkpoint") + 8])
    assert size == "1.0 MB"  # 1,000,000 bytes: kB and MB of 1,000
    assert f"<td>{size}</td>" in client(path).get(f"/trials/{trials[0]}").text


def test_the_pages_read_a_store_in_postgresql_naming_it_without_its_password(postgres_server, postgres_url):
    with ExperimentStore(postgres_url) as store:
        config = {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True}}
        experiment_id = store.create_experiment("on-a-server", config, "/context", "model_def:Trial", 1, False)
        trial_id = store.create_trial(experiment_id, {}, 1, "/checkpoints")
        log = store.log_writer(LogOwner.trial(trial_id), pytest.fail)
        log.write(f"first line {XSS}\n")
        log.close()
    location = StoreLocation(url=postgres_url)

    web = client(location)
    page = web.get("/")

    assert page.status_code == 200 and "on-a-server" in page.text
    assert location.shown in page.text and "det-test-secret" not in page.text
    assert f"/experiments/{experiment_id}" in page.text
    # The trial's log, from the database, and then what it printed since.
    assert "first line &lt;script&gt;" in web.get(f"/trials/{trial_id}").text
    chunk = web.get(f"/trials/{trial_id}/log").json()
    with ExperimentStore(postgres_url) as store:
        log = store.log_writer(LogOwner.trial(trial_id), pytest.fail)
        log.write("second line\n")
        log.close()
    assert web.get(f"/trials/{trial_id}/log", params={"offset": chunk["offset"]}).json()["text"] == "second line\n"


def test_a_page_over_an_empty_postgresql_database_says_there_is_no_store_and_makes_none(postgres_server, postgres_url):
    page = client(StoreLocation(url=postgres_url)).get("/")

    assert page.status_code == 503 and "There is no experiment store in the database" in page.text
    assert "det-test-secret" not in page.text
    database = postgres_url.rsplit("/", 1)[1]
    tables = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
    assert postgres_server.sql(database, tables).strip() == "0"
