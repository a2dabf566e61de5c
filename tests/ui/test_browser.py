"""The web page in a real browser: headless Chromium, driven by Selenium, against a real server over a real search.

One store and one server for the module: a real adaptive ASHA search of the Core API
script in tests/support/search_script.py (8 trials, a few seconds), named with a script
tag. Each test checks one behaviour and has its own timeout. Screenshots of the three
pages go to test-artifacts/ui/ (or $DET_ESTIMATOR_UI_ARTIFACTS).

Chromium comes from the distribution's `chromium` and `chromium-driver` packages, which
scripts/setup_system.sh installs. Where they are missing the tests skip, saying so,
except under CI (CI=true), where they fail: a silent skip there would hide that the
page went untested.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from det_estimator import orchestration
from det_estimator.store import ExperimentStore, State

SUPPORT = Path(__file__).parents[1] / "support"
ROOT = Path(__file__).parents[2]
XSS = "<script>alert(1)</script>"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("DET_ESTIMATOR_UI_ARTIFACTS") or ROOT / "test-artifacts" / "ui")


def _missing() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        return f"{' and '.join(missing)} not installed (Debian: apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return ""


if _missing() and os.environ.get("CI") == "true":
    pytest.fail(f"the browser tests cannot run in CI: {_missing()}", pytrace=False)

pytestmark = [
    pytest.mark.skipif(bool(_missing()), reason=f"no browser: {_missing()}"),
    # One server, one store and one browser for the module, on one test process.
    pytest.mark.xdist_group("ui_browser"),
    # The page and the search behind it run no TensorFlow: the same on both stacks.
    pytest.mark.any_stack,
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def command(store: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from det_estimator.cli import main; sys.exit(main())",
        "--store",
        str(store),
        *args,
    ]


def write_config(directory: Path, filename: str, name: str, searcher: dict, hparams: dict) -> Path:
    config = {
        "name": name,
        "entrypoint": "python3 search_script.py",
        "hyperparameters": hparams,
        "searcher": {"metric": "loss", **searcher},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 1},
        "reproducibility": {"experiment_seed": 11},
        "max_restarts": 0,
    }
    path = directory / filename
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    """A store that a real adaptive ASHA search of 8 trials filled: (store path, experiment id, context dir)."""
    root = tmp_path_factory.mktemp("ui")
    context = root / "search"
    context.mkdir()
    shutil.copy(SUPPORT / "search_script.py", context)
    hparams = {
        "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
        "width": {"type": "categorical", "vals": [8, 16, "wide"]},
        "checkpoint_every": 4,
    }
    searcher = {
        "name": "adaptive_asha",
        "max_trials": 8,
        "mode": "aggressive",
        "divisor": 4,
        "max_length": {"batches": 64},
        "max_concurrent_trials": 2,
    }
    store = root / "store.sqlite"
    config = write_config(context, "search.yaml", XSS, searcher, hparams)
    subprocess.run(
        command(store, "experiment", "create", str(config), str(context), "--slots", "2"),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return store, 1, context


def start_server(store: Path, *args: str):
    """A real ``det-estimator ui`` on a free port, and the file its output goes to (a pipe nobody reads could fill)."""
    port = free_port()
    output = store.parent / f"ui-{port}.log"
    with open(output, "w") as log:
        server = subprocess.Popen(
            command(store, "ui", "--port", str(port), "--refresh", "1", *args), stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return server, port, output
        if server.poll() is not None:
            raise AssertionError(f"the server exited: {output.read_text()}")
        time.sleep(0.1)
    server.kill()
    raise AssertionError("the server did not listen within 60 s")


@pytest.fixture(scope="module")
def server(search):
    process, port, _ = start_server(search[0])
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="det-ui-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        # Plotly's parallel coordinates draw with WebGL: software WebGL, with no GPU.
        "--enable-unsafe-swiftshader",
        f"--user-data-dir={profile}",
        "--window-size=1400,1800",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait_for(condition, timeout=60.0, what="the condition"):
    """Polls `condition`; an element the page's refresh replaced between finding and reading it counts as not yet."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except StaleElementReferenceException:
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def screenshot(browser, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def no_alert(browser) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        browser.switch_to.alert  # noqa: B018 -- raises when there is none
    except NoAlertPresentException:
        return True
    return False


@pytest.mark.timeout(120)
def test_the_experiments_page_lists_the_search_with_its_name_as_text(browser, server, search):
    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-experiment-id="{search[1]}"]')
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == XSS  # the name shows as written, as text
    assert cells[2] == "COMPLETED" and cells[5] == "8"
    assert cells[4].startswith("loss ")
    assert no_alert(browser) and not browser.find_elements(By.XPATH, "//td[@class='name']//script")
    screenshot(browser, "experiments")


@pytest.mark.timeout(120)
def test_the_experiment_page_draws_the_curves_and_the_parallel_coordinates_of_every_trial(browser, server, search):
    from selenium.webdriver.common.by import By

    store_path, experiment_id, _ = search
    browser.get(f"{server}/experiments/{experiment_id}")
    wait_for(lambda: browser.execute_script("return document.body.dataset.chartsDrawn === '1'"), what="the charts")
    with ExperimentStore(store_path) as store:
        trials = store.trials(experiment_id)
        best = store.best_validation(experiment_id)
    # One line per trial in the learning curves (validation loss), drawn as SVG paths.
    lines = browser.find_elements(By.CSS_SELECTOR, "#curves .scatterlayer .trace")
    assert len(lines) == len(trials)
    names = browser.execute_script("return document.getElementById('curves').data.map((trace) => trace.name)")
    assert f"trial {best.trial_id} (best)" in names
    # The parallel coordinates: an axis per varying hyperparameter and the metric, carrying every trial's values.
    axes = browser.find_elements(By.CSS_SELECTOR, "#parcoords .y-axis")
    assert len(axes) == 3
    dimensions = browser.execute_script(
        "return document.getElementById('parcoords').data[0].dimensions.map((d) => [d.label, d.values])"
    )
    by_label = dict((label, values) for label, values in dimensions)
    assert sorted(by_label) == ["loss", "width", "x"]
    assert sorted(by_label["x"]) == sorted(trial.hparams["x"] for trial in trials)
    assert min(by_label["loss"]) == pytest.approx(best.value)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#scatter .chart")) == 2
    assert browser.find_element(By.ID, "experiment-name").text == XSS and no_alert(browser)
    # Which trials reached which rung: all 8 the first (16 batches), the best among those at the top (64).
    rungs = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#rungs tbody tr")]
    assert [rung.split()[:4] for rung in rungs] == [["0", "0", "16", "batches"], ["0", "1", "64", "batches"]]
    assert rungs[0].count(",") == 7 and rungs[1].split()[4].rstrip(",") == str(best.trial_id)
    screenshot(browser, "experiment")


def click(browser, selector: str) -> None:
    """Clicks the element, found again if the page's refresh swapped it in the meantime."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(10):
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.1)
    raise AssertionError(f"{selector} kept being replaced")


def column(browser, index: int) -> list:
    """The cells of a column of the trial table, read at once (the page's refresh replaces the table)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#trials tbody tr'), (r) => r.cells[arguments[0]].textContent)",
        index,
    )


@pytest.mark.timeout(120)
def test_the_trial_table_sorts_by_the_metric(browser, server, search):
    browser.get(f"{server}/experiments/{search[1]}")
    best_column = 4  # trial, state, batches, restarts, best loss, ...
    losses = [float(value) for value in column(browser, best_column)]
    assert len(losses) == 8 and losses == sorted(losses)  # best first: loss, smaller is better
    click(browser, 'th[data-column="best"] a')
    wait_for(lambda: "desc=1" in browser.current_url, what="sorting")
    losses = [float(value) for value in column(browser, best_column)]
    assert losses == sorted(losses, reverse=True)
    click(browser, 'th[data-column="hp:x"] a')
    wait_for(lambda: "sort=hp" in browser.current_url, what="sorting by x")
    headers = browser.execute_script(
        "return Array.from(document.querySelectorAll('#trials th'), (th) => th.dataset.column)"
    )
    xs = [float(value) for value in column(browser, headers.index("hp:x"))]
    assert xs == sorted(xs)


@pytest.mark.timeout(120)
def test_the_trial_page_shows_validations_checkpoints_with_their_load_call_and_the_log(browser, server, search):
    from selenium.webdriver.common.by import By

    store_path, experiment_id, _ = search
    with ExperimentStore(store_path) as store:
        best = store.best_validation(experiment_id)
        checkpoint = store.checkpoints(experiment_id, trial_id=best.trial_id)[-1]
    browser.get(f"{server}/trials/{best.trial_id}")
    assert browser.find_element(By.ID, "trial-state").text == "COMPLETED"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#validations tbody tr")) == 2  # the two rungs
    row = browser.find_element(By.CSS_SELECTOR, "#checkpoints tbody tr")
    assert checkpoint.uuid in row.text and f"restore_path('{checkpoint.uuid}')" in row.text
    assert f"run 1 of trial {best.trial_id}" in browser.find_element(By.ID, "log").text
    screenshot(browser, "trial")


@pytest.mark.timeout(180)
def test_pause_from_the_page_pauses_a_running_experiment_which_resume_from_the_page_runs_again(browser, server, search):
    from selenium.webdriver.common.by import By

    store_path, _, context = search
    resumed_by = None
    config = write_config(
        context,
        "slow.yaml",
        "slow",
        {"name": "single", "max_length": {"batches": 2000}},
        {"x": 0.3, "seconds_per_batch": 0.05, "checkpoint_every": 2},
    )
    running = subprocess.Popen(
        command(store_path, "experiment", "create", str(config), str(context)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with ExperimentStore(store_path) as store:
            experiment_id = wait_for(
                lambda: next((e.id for e in store.experiments() if e.name == "slow" and e.batches_trained > 0), None),
                what="the experiment to start training",
            )
        browser.get(f"{server}/experiments/{experiment_id}")
        wait_for(lambda: browser.find_element(By.ID, "experiment-state").text == "ACTIVE", what="ACTIVE on the page")
        click(browser, "#pause")
        wait_for(lambda: "Pausing experiment" in browser.find_element(By.ID, "notice").text, what="the notice")
        browser.execute_script("window.notReloaded = true")
        assert running.wait(timeout=120) == 0
        with ExperimentStore(store_path) as store:
            assert store.experiment(experiment_id).state == State.PAUSED
        # The page's refresh (every second here) shows it, without a reload of the page.
        wait_for(lambda: browser.find_element(By.ID, "experiment-state").text == "PAUSED", what="PAUSED on the page")
        assert browser.execute_script("return window.notReloaded === true")
        # Resume from the page: `experiment resume` runs in a process of its own, and the experiment trains again.
        click(browser, "#resume")
        wait_for(lambda: "Resuming experiment" in browser.find_element(By.ID, "notice").text, what="the notice")
        with ExperimentStore(store_path) as store:
            before = store.experiment(experiment_id).batches_trained
            wait_for(
                lambda: (
                    store.experiment(experiment_id).state == State.ACTIVE
                    and store.experiment(experiment_id).batches_trained > before
                ),
                what="the resumed experiment to train",
            )
            resumed_by = store.experiment(experiment_id).launcher_pid
            orchestration.request_pause(store, experiment_id)
            wait_for(lambda: store.experiment(experiment_id).state == State.PAUSED, what="the second pause")
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
        if resumed_by is not None and psutil.pid_exists(resumed_by):
            psutil.Process(resumed_by).kill()


@pytest.mark.timeout(120)
def test_a_server_on_another_address_refuses_every_page_without_its_token(browser, search):
    from selenium.webdriver.common.by import By

    # 0.0.0.0: every address of this machine, so not a loopback one; reached here through 127.0.0.1.
    process, port, output = start_server(search[0], "--host", "0.0.0.0")
    try:
        browser.get(f"http://127.0.0.1:{port}/")
        assert "every page needs its token" in browser.find_element(By.ID, "error-message").text
        assert not browser.find_elements(By.ID, "experiments")
        printed = output.read_text().splitlines()[0]
        address = printed.split(" at ", 1)[1].split(" ", 1)[0]
        assert "?token=" in address
        browser.get(address.replace("0.0.0.0", "127.0.0.1"))
        assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-experiment-id="{search[1]}"]')
        assert "token" not in browser.current_url  # taken out of the address bar, kept in a cookie
    finally:
        process.terminate()
        process.wait(timeout=30)
