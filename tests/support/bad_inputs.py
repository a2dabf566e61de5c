"""Bad inputs to the det-estimator command, each with the exit status and the message it must get.

Shared by ``tests/cli/test_bad_inputs.py`` (which runs them in-process, fast) and
``benchmarks/bad_inputs.py`` (which runs the installed command and counts). Every case
names what is wrong in words a user would use; the fragment is a part of the message
that says what was wrong or what is expected.

A case's command line may use ``{dir}`` (the case's own folder, holding the analytic
trial and ``ok.yaml``), ``{store}`` (a store holding one COMPLETED experiment, id 1, with
one trial, id 1) and ``{ok}`` (``{dir}/ok.yaml``).
"""

import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

SUPPORT = Path(__file__).resolve().parent

OK_CONFIG: dict[str, Any] = {
    "name": "analytic",
    "entrypoint": "analytic_trial:AnalyticTrial",
    "hyperparameters": {"global_batch_size": 8, "learning_rate": 0.01, "events_dir": "events"},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    "scheduling_unit": 5,
    "min_validation_period": {"batches": 5},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints"},
}


@dataclass(frozen=True)
class BadInput:
    """One bad command line.

    Attributes:
        name: what is wrong, in a few words.
        argv: the command line after ``det-estimator`` (with ``{dir}``, ``{store}``, ``{ok}``).
        message: a fragment the error output must contain.
        status: the exit status expected.
        files: files to write into the case's folder first: name -> text, bytes, or a
            config dict written as YAML.
        prepare: called with the case's folder after the files are written.
    """

    name: str
    argv: tuple[str, ...]
    message: str
    status: int = 2
    files: dict[str, Any] = field(default_factory=dict)
    prepare: Optional[Callable[[Path], None]] = None

    def command_line(self, directory: Path, store: Path) -> list[str]:
        values = {"dir": str(directory), "store": str(store), "ok": str(directory / "ok.yaml")}
        return [part.format(**values) for part in self.argv]

    def set_up(self, directory: Path) -> None:
        """Writes the analytic trial, ``ok.yaml`` and the case's own files into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(SUPPORT / "analytic_trial.py", directory / "analytic_trial.py")
        shutil.copy(SUPPORT / "analytic_closed_form.py", directory / "analytic_closed_form.py")
        (directory / "ok.yaml").write_text(yaml.safe_dump(OK_CONFIG), encoding="utf-8")
        for name, content in self.files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            elif isinstance(content, str):
                path.write_text(content, encoding="utf-8")
            else:
                path.write_text(yaml.safe_dump(content), encoding="utf-8")
        if self.prepare is not None:
            self.prepare(directory)


def config(**changes: Any) -> dict[str, Any]:
    """``OK_CONFIG`` with top-level keys replaced (None removes one)."""
    raw = yaml.safe_load(yaml.safe_dump(OK_CONFIG))
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def searcher(**changes: Any) -> dict[str, Any]:
    section = dict(OK_CONFIG["searcher"], **changes)
    return {key: value for key, value in section.items() if value is not None}


def hyperparameters(**changes: Any) -> dict[str, Any]:
    section = dict(OK_CONFIG["hyperparameters"], **changes)
    return {key: value for key, value in section.items() if value is not None}


def storage(**changes: Any) -> dict[str, Any]:
    return dict(OK_CONFIG["checkpoint_storage"], **changes)


def _alias_bomb() -> str:
    lines = ["data:", "  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return yaml.safe_dump(OK_CONFIG) + "\n".join(lines) + "\n"


def _newer_schema_store(directory: Path) -> None:
    """A store marked as det-estimator's, of a schema version beyond this release's."""
    with sqlite3.connect(directory / "newer.sqlite") as connection:
        connection.execute(
            "CREATE TABLE store_info (id INTEGER PRIMARY KEY, application TEXT, schema_version INTEGER,"
            " store_id TEXT, home TEXT, created_at REAL)"
        )
        connection.execute("INSERT INTO store_info VALUES (1, 'det-estimator', 999, 'a1b2', NULL, 0)")
        connection.execute("PRAGMA user_version = 999")


def _damaged_store(directory: Path) -> None:
    """A det-estimator store whose header and schema read, and every page after the first is overwritten."""
    from det_estimator.store import ExperimentStore

    path = directory / "damaged.sqlite"
    with ExperimentStore(path):
        pass
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big")
    path.write_bytes(data[:page_size] + b"\xa5" * (len(data) - page_size))


def _foreign_database(directory: Path) -> None:
    """An SQLite database another application made (a browser's history, say)."""
    with sqlite3.connect(directory / "places.sqlite") as connection:
        connection.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
    connection.close()


def _copied_store(directory: Path) -> None:
    """A store, and a copy of it (``copy.sqlite``) while the original still exists."""
    from det_estimator.store import ExperimentStore

    with ExperimentStore(directory / "original.sqlite"):
        pass
    shutil.copy(directory / "original.sqlite", directory / "copy.sqlite")


def _create(name: str, **files: Any) -> tuple[str, ...]:
    return ("--store", "{dir}/new.sqlite", "experiment", "create", "{dir}/" + name, "{dir}")


def _bad_config(name: str, raw: Any, message: str) -> BadInput:
    """A config that ``experiment create`` must refuse."""
    return BadInput(name, _create("bad.yaml"), message, files={"bad.yaml": raw})


CASES: list[BadInput] = [
    # The command line.
    BadInput("no command at all", (), "usage: det-estimator"),
    BadInput("an unknown command", ("frobnicate",), "invalid choice: 'frobnicate'"),
    BadInput("experiment without an action", ("experiment",), "the following arguments are required: ACTION"),
    BadInput("create without a config", ("experiment", "create"), "the following arguments are required: CONFIG"),
    BadInput("--slots 0", ("experiment", "create", "{ok}", "{dir}", "--slots", "0"), "must be a positive integer"),
    BadInput("--slots -1", ("experiment", "create", "{ok}", "{dir}", "--slots", "-1"), "must be a positive integer"),
    BadInput("--slots abc", ("experiment", "create", "{ok}", "{dir}", "--slots", "abc"), "must be a positive integer"),
    BadInput("a negative --seed", ("experiment", "create", "{ok}", "{dir}", "--seed", "-5"), "from 0 to 2**31 - 1"),
    BadInput("--seed of 2**31", ("experiment", "create", "{ok}", "{dir}", "--seed", "2147483648"), "from 0 to 2**31"),
    BadInput("--hosts without slots", ("experiment", "create", "{ok}", "{dir}", "--hosts", "a"), "host:slots entries"),
    BadInput("--hosts with 0 slots", ("experiment", "create", "{ok}", "{dir}", "--hosts", "a:0"), "host:slots entries"),
    BadInput(
        "--slots other than --hosts give",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{ok}", "{dir}", "--slots", "3", "--hosts", "a:1,b:1"),
        "--slots 3 differs from the 2 slots of --hosts a:1,b:1",
    ),
    BadInput(
        "a new --store in a folder that does not exist",
        # Under new-files/: the test checks that no such folder is made.
        ("--store", "{dir}/new-files/typo/store.sqlite", "experiment", "create", "{ok}", "{dir}"),
        "new-files/typo to make the store in. Give a store in an existing folder, or make the folder first",
    ),
    BadInput(
        "another loopback address in --hosts, with no ssh server there",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{ok}", "{dir}", "--hosts", "localhost:1,127.0.0.2:1"),
        "--hosts: host '127.0.0.2'",
    ),
    BadInput(
        "a host of 0 slots in --hosts",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{ok}", "{dir}", "--hosts", "localhost:0"),
        "'localhost:0' gives localhost 0 slots; a host listed needs at least 1",
    ),
    BadInput(
        "an unknown host in --hosts",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{ok}", "{dir}", "--hosts", "nohost.invalid:2"),
        "host 'nohost.invalid' is not known",
    ),
    BadInput(
        "more slots than this machine's memory holds, in --hosts",
        (
            "--store",
            "{dir}/new.sqlite",
            "experiment",
            "create",
            "{dir}/big_batch.yaml",
            "{dir}",
            "--hosts",
            "localhost:4096",
        ),
        "--hosts localhost:4096 gives this machine 4096 slots, but this machine's",
        files={"big_batch.yaml": config(hyperparameters=hyperparameters(global_batch_size=8192))},
    ),
    BadInput(
        "more slots than this machine's memory holds",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{dir}/big_batch.yaml", "{dir}", "--slots", "4096"),
        "4096 slots asked for, but this machine's",
        files={"big_batch.yaml": config(hyperparameters=hyperparameters(global_batch_size=8192))},
    ),
    BadInput(
        "more slots than the memory holds, and than the global batch size",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{ok}", "{dir}", "--slots", "99999999999999999999"),
        "99999999999999999999 slots asked for, but this machine's",
    ),
    BadInput("a non-integer id", ("experiment", "describe", "one"), "argument ID: must be an id, an integer from 1"),
    BadInput("an id of 0", ("--store", "{store}", "trial", "describe", "0"), "must be an id, an integer from 1"),
    BadInput(
        "an experiment id too large for the store",
        ("--store", "{store}", "experiment", "describe", "99999999999999999999"),
        "argument ID: must be an id, an integer from 1 to 2**63 - 1, not '99999999999999999999'",
    ),
    BadInput(
        "a trial id too large for the store",
        ("--store", "{store}", "trial", "logs", "9223372036854775808"),
        "argument ID: must be an id, an integer from 1 to 2**63 - 1, not '9223372036854775808'",
    ),
    BadInput(
        "an experiment id too large for the store, to list its trials",
        ("--store", "{store}", "trial", "list", "9223372036854775808"),
        "argument EXPERIMENT_ID: must be an id",
    ),
    BadInput(
        "a job id too large for the store", ("--store", "{store}", "job", "logs", "1e30"), "argument ID: must be an id"
    ),
    # Files and folders.
    BadInput("a CONFIG that does not exist", _create("missing.yaml"), "is not a file"),
    BadInput("a CONFIG that is a folder", _create("folder.yaml"), "is not a file", files={"folder.yaml/x": ""}),
    BadInput(
        "a CONTEXT_DIR that does not exist",
        ("--store", "{dir}/new.sqlite", "experiment", "create", "{ok}", "{dir}/nowhere"),
        "is not a directory",
    ),
    _bad_config("an empty config", "", "must be a mapping of keys to values"),
    _bad_config("a config that is a list", "- a\n- b\n", "must be a mapping of keys to values"),
    _bad_config("invalid YAML", "name: [unclosed\n", "is not valid YAML"),
    _bad_config("a key given twice", "name: a\nname: b\n", "found duplicate key 'name'"),
    _bad_config("a YAML alias bomb", _alias_bomb(), "expands to more than 100,000 values"),
    _bad_config(
        "a list as a key", yaml.safe_dump(OK_CONFIG) + "[a, b]: 1\n", "is not valid YAML: while constructing a mapping"
    ),
    _bad_config(
        "values nested thousands of levels deep",
        yaml.safe_dump(OK_CONFIG) + "data: {x: " + "[" * 3000 + "]" * 3000 + "}\n",
        "nests lists and mappings more than 100 levels deep",
    ),
    _bad_config("an alias inside its own anchor", "data: &d\n  x: *d\n", "alias inside its own anchor"),
    _bad_config("a config of 2 MB", "data: " + "x" * 2_000_000 + "\n", "a config is at most"),
    BadInput("a config that is not text", _create("bad.yaml"), "is not UTF-8 text", files={"bad.yaml": b"\xff\xfe"}),
    # The config's keys.
    _bad_config("an unknown top-level key", config(max_lenght={"batches": 1}), "unknown key `max_lenght`"),
    _bad_config("no entrypoint", config(entrypoint=None), "entrypoint"),
    _bad_config("an entrypoint without a class", config(entrypoint="analytic_trial"), "entrypoint"),
    _bad_config(
        "entrypoint and entrypoint_script",
        config(entrypoint_script="python3 train.py"),
        "give either `entrypoint` or `entrypoint_script`",
    ),
    _bad_config("no hyperparameters", config(hyperparameters=None), "global_batch_size"),
    _bad_config(
        "no global_batch_size", config(hyperparameters=hyperparameters(global_batch_size=None)), "global_batch_size"
    ),
    _bad_config(
        "a global_batch_size of 0", config(hyperparameters=hyperparameters(global_batch_size=0)), "global_batch_size"
    ),
    _bad_config(
        "a global_batch_size that is text",
        config(hyperparameters=hyperparameters(global_batch_size="eight")),
        "global_batch_size",
    ),
    _bad_config(
        "an int hyperparameter with minval above maxval",
        config(hyperparameters=hyperparameters(units={"type": "int", "minval": 5, "maxval": 1})),
        "hyperparameters.units",
    ),
    _bad_config(
        "a categorical hyperparameter without values",
        config(hyperparameters=hyperparameters(act={"type": "categorical", "vals": []})),
        "hyperparameters.act",
    ),
    _bad_config(
        "a hyperparameter of an unknown type",
        config(hyperparameters=hyperparameters(units={"type": "integer", "minval": 1, "maxval": 5})),
        "hyperparameters.units",
    ),
    _bad_config("no searcher", config(searcher=None), "searcher"),
    _bad_config("an unknown searcher", config(searcher=searcher(name="bayes")), "searcher.name"),
    _bad_config("no searcher metric", config(searcher=searcher(metric=None)), "searcher.metric"),
    _bad_config("no max_length", config(searcher=searcher(max_length=None)), "searcher.max_length"),
    _bad_config("a negative max_length", config(searcher=searcher(max_length={"batches": -5})), "searcher.max_length"),
    _bad_config(
        "max_length in an unknown unit", config(searcher=searcher(max_length={"steps": 5})), "searcher.max_length"
    ),
    _bad_config(
        "max_length too large for the store",
        config(searcher=searcher(max_length={"batches": 2**63})),
        "`searcher.max_length.batches` must be a positive integer of at most 2**63 - 1",
    ),
    _bad_config(
        "global_batch_size too large for TensorFlow",
        config(hyperparameters=hyperparameters(global_batch_size=2**63)),
        "`hyperparameters.global_batch_size` must be a positive integer of at most 2**63 - 1",
    ),
    _bad_config(
        "max_length in epochs without records_per_epoch",
        config(searcher=searcher(max_length={"epochs": 2})),
        "records_per_epoch",
    ),
    _bad_config(
        "a random search of 0 trials",
        config(searcher=searcher(name="random", max_trials=0)),
        "searcher.max_trials",
    ),
    _bad_config(
        "an adaptive_asha search without max_trials",
        config(searcher=searcher(name="adaptive_asha")),
        "searcher.max_trials",
    ),
    _bad_config(
        "a grid over a double without a count",
        config(
            searcher=searcher(name="grid"),
            hyperparameters=hyperparameters(learning_rate={"type": "double", "minval": 0.1, "maxval": 1.0}),
        ),
        "count",
    ),
    _bad_config(
        "a grid of 10 hyperparameters of 100 values each",
        config(
            searcher=searcher(name="grid", max_concurrent_trials=0),
            hyperparameters=hyperparameters(
                **{f"h{i}": {"type": "int", "minval": 0, "maxval": 1000, "count": 100} for i in range(10)}
            ),
        ),
        "the grid search would create 100,000,000,000,000,000,000 trials",
    ),
    _bad_config("a scheduling_unit of 0", config(scheduling_unit=0), "scheduling_unit"),
    _bad_config(
        "a negative hang_timeout_seconds",
        config(hang_timeout_seconds=-1),
        "`hang_timeout_seconds` must be a non-negative integer. Received: -1",
    ),
    _bad_config(
        "a hang_timeout_seconds in words",
        config(hang_timeout_seconds="30 minutes"),
        "`hang_timeout_seconds` must be a non-negative integer. Received: '30 minutes'",
    ),
    _bad_config(
        "a fractional hang_timeout_seconds",
        config(hang_timeout_seconds=0.5),
        "`hang_timeout_seconds` must be a non-negative integer. Received: 0.5",
    ),
    _bad_config(
        "hang_timeout_seconds: true",
        config(hang_timeout_seconds=True),
        "`hang_timeout_seconds` must be a non-negative integer. Received: True",
    ),
    _bad_config("negative records_per_epoch", config(records_per_epoch=-1), "records_per_epoch"),
    _bad_config(
        "a validation period in an unknown unit", config(min_validation_period={"days": 1}), "min_validation_period"
    ),
    _bad_config("0 slots per trial", config(resources={"slots_per_trial": 0}), "resources.slots_per_trial"),
    _bad_config("checkpoints on S3", config(checkpoint_storage=storage(type="s3")), "checkpoint_storage"),
    _bad_config(
        "a negative save_trial_latest",
        config(checkpoint_storage=storage(save_trial_latest=-1)),
        "checkpoint_storage.save_trial_latest",
    ),
    _bad_config(
        "checkpoints under /proc",
        config(checkpoint_storage=storage(host_path="/proc/det-estimator-checkpoints")),
        "cannot hold checkpoints",
    ),
    BadInput(
        "checkpoints in a path that is a file",
        _create("bad.yaml"),
        "is a file. Expected a directory",
        files={"bad.yaml": config(checkpoint_storage=storage(host_path="a_file")), "a_file": "not a folder"},
    ),
    # The entrypoint.
    _bad_config(
        "an entrypoint module that is not there",
        config(entrypoint="no_such_module:AnalyticTrial"),
        "entrypoint module 'no_such_module' is not in CONTEXT_DIR",
    ),
    _bad_config(
        "an entrypoint class that is not there",
        config(entrypoint="analytic_trial:NoSuchTrial"),
        "names 'NoSuchTrial', which",
    ),
    BadInput(
        "an entrypoint that is a function",
        _create("bad.yaml"),
        "is a function",
        files={"bad.yaml": config(entrypoint="model:train"), "model.py": "def train():\n    pass\n"},
    ),
    BadInput(
        "an entrypoint that is a value",
        _create("bad.yaml"),
        "is a value",
        files={"bad.yaml": config(entrypoint="model:NUM_RECORDS"), "model.py": "NUM_RECORDS = 64\n"},
    ),
    BadInput(
        "an entrypoint class that derives from nothing",
        _create("bad.yaml"),
        "derives from nothing",
        files={"bad.yaml": config(entrypoint="plain:Plain"), "plain.py": "class Plain:\n    pass\n"},
    ),
    BadInput(
        "an entrypoint class that is a Keras model",
        _create("bad.yaml"),
        "derives only from classes of tensorflow (tf.keras.Model, line 4 of",
        files={
            "bad.yaml": config(entrypoint="model:Net"),
            "model.py": "import tensorflow as tf\n\n\nclass Net(tf.keras.Model):\n    pass\n",
        },
    ),
    BadInput(
        "an entrypoint class that is a Keras callback imported by name",
        _create("bad.yaml"),
        "derives only from classes of keras (Callback, line 4 of",
        files={
            "bad.yaml": config(entrypoint="model:Hook"),
            "model.py": "from keras.callbacks import Callback\n\n\nclass Hook(Callback):\n    pass\n",
        },
    ),
    BadInput(
        "a trial class whose __init__ takes no context",
        _create("bad.yaml"),
        "its __init__ (line 5 of",
        files={
            "bad.yaml": config(entrypoint="model:Trial"),
            "model.py": (
                "import det_estimator as det\n\n\nclass Trial(det.estimator.EstimatorTrial):\n"
                "    def __init__(self):\n        pass\n\n"
                "    def build_estimator(self): ...\n    def build_train_spec(self): ...\n"
                "    def build_validation_spec(self): ...\n"
            ),
        },
    ),
    BadInput(
        "a Keras trial class that has no build_validation_data_loader",
        _create("bad.yaml"),
        "derives from TFKerasTrial but does not define build_validation_data_loader",
        files={
            "bad.yaml": config(entrypoint="model:Trial"),
            "model.py": (
                "from det_estimator.keras import TFKerasTrial\n\n\nclass Trial(TFKerasTrial):\n"
                "    def __init__(self, context):\n        super().__init__(context)\n\n"
                "    def build_model(self): ...\n    def build_training_data_loader(self): ...\n"
            ),
        },
    ),
    BadInput(
        "an entrypoint that names an imported module",
        _create("bad.yaml"),
        "The config's entrypoint 'analytic_trial:np' is a module (imported on line",
        files={"bad.yaml": config(entrypoint="analytic_trial:np")},
    ),
    BadInput(
        "an entrypoint that is a builtin type",
        _create("bad.yaml"),
        "The config's entrypoint 'model:Trial' is Python's dict (line 1 of",
        files={"bad.yaml": config(entrypoint="model:Trial"), "model.py": "Trial = dict\n"},
    ),
    BadInput(
        "an entrypoint module with a syntax error",
        _create("bad.yaml"),
        "is not valid Python",
        files={"bad.yaml": config(entrypoint="broken:Trial"), "broken.py": "class Trial(\n"},
    ),
    _bad_config(
        "an entrypoint script that is not there",
        config(entrypoint="python3 nowhere.py", hyperparameters=None),
        "runs nowhere.py, which is not in CONTEXT_DIR",
    ),
    _bad_config(
        "an entrypoint program that is misspelled",
        config(entrypoint="pyhton3 analytic_trial.py", hyperparameters=None),
        "The config's entrypoint 'pyhton3 analytic_trial.py' runs 'pyhton3', which is not a program on PATH",
    ),
    BadInput(
        "an entrypoint program that is not executable",
        _create("bad.yaml"),
        "run.sh, which is not an executable file",
        files={"bad.yaml": config(entrypoint="./run.sh --fast", hyperparameters=None), "run.sh": "echo hi\n"},
    ),
    BadInput(
        "an entrypoint program path that is not there",
        _create("bad.yaml"),
        "run.sh, which is not there",
        files={"bad.yaml": config(entrypoint=["bin/run.sh"], hyperparameters=None)},
    ),
    BadInput(
        "a job command whose program is misspelled",
        ("--store", "{dir}/new.sqlite", "job", "run", "{dir}/job.yaml", "{dir}"),
        "The job's command 'pyhton3 analytic_trial.py' runs 'pyhton3', which is not a program on PATH",
        files={"job.yaml": {"entrypoint_script": "pyhton3 analytic_trial.py", "data": {"a": 1}}},
    ),
    # Experiments, trials and ids.
    BadInput(
        "describe an unknown experiment", ("--store", "{store}", "experiment", "describe", "99"), "no experiment 99"
    ),
    BadInput("pause an unknown experiment", ("--store", "{store}", "experiment", "pause", "99"), "no experiment 99"),
    BadInput("resume an unknown experiment", ("--store", "{store}", "experiment", "resume", "99"), "no experiment 99"),
    BadInput(
        "plot an unknown experiment", ("--store", "{store}", "experiment", "plot", "99", "-o", "{dir}/c.png"), "99"
    ),
    BadInput(
        "resume a completed experiment",
        ("--store", "{store}", "experiment", "resume", "1"),
        "is COMPLETED: it has completed; nothing to resume",
    ),
    BadInput(
        "pause with a negative --timeout",
        ("--store", "{store}", "experiment", "pause", "1", "--timeout", "-5"),
        "argument --timeout: must be a number of seconds, 0 or more, not '-5'",
    ),
    BadInput(
        "pause with a --timeout of nan",
        ("--store", "{store}", "experiment", "pause", "1", "--timeout", "nan"),
        "argument --timeout: must be a number of seconds, 0 or more, not 'nan'",
    ),
    BadInput(
        "pause a completed experiment",
        ("--store", "{store}", "experiment", "pause", "1"),
        "only an ACTIVE one can be paused",
    ),
    BadInput(
        "plot to a file of no image format",
        ("--store", "{store}", "experiment", "plot", "1", "-o", "{dir}/curves.txt"),
        "name a .png, .svg or .pdf file",
    ),
    BadInput(
        "plot into a folder that cannot be made",
        ("--store", "{store}", "experiment", "plot", "1", "-o", "{dir}/ok.yaml/curves.png"),
        "cannot write into",
    ),
    BadInput(
        "plot under /proc",
        ("--store", "{store}", "experiment", "plot", "1", "-o", "/proc/curves.png"),
        "cannot write into",
    ),
    BadInput("checkpoints of an unknown experiment", ("--store", "{store}", "checkpoint", "list", "99"), "99"),
    BadInput(
        "describe an unknown checkpoint",
        ("--store", "{store}", "checkpoint", "describe", "0123abcd"),
        "There is no checkpoint 0123abcd in the store",
    ),
    BadInput(
        "download an unknown checkpoint",
        ("--store", "{store}", "checkpoint", "download", "0123abcd", "-o", "{dir}/out"),
        "There is no checkpoint 0123abcd in the store",
    ),
    BadInput(
        "download into a blank --output-dir",
        ("--store", "{store}", "checkpoint", "download", "0123abcd", "--output-dir", ""),
        "argument -o/--output-dir: must name a directory, not ''",
    ),
    BadInput(
        "describe a blank checkpoint uuid",
        ("--store", "{store}", "checkpoint", "describe", " "),
        "argument UUID: must be a checkpoint's uuid, or its first characters, not ' '",
    ),
    BadInput("logs of an unknown trial", ("--store", "{store}", "trial", "logs", "99"), "99"),
    BadInput("describe an unknown trial", ("--store", "{store}", "trial", "describe", "99"), "99"),
    BadInput("trials of an unknown experiment", ("--store", "{store}", "trial", "list", "99"), "99"),
    # Stores.
    BadInput(
        "a store that does not exist, to read",
        ("--store", "{dir}/nowhere/store.sqlite", "experiment", "describe", "1"),
        "There is no experiment store at",
    ),
    BadInput(
        "a store that does not exist, to list",
        ("--store", "{dir}/nowhere/store.sqlite", "experiment", "list"),
        "There is no experiment store at",
    ),
    BadInput(
        "a store that is an empty file, to read",
        ("--store", "{dir}/empty.sqlite", "experiment", "list"),
        "is an empty file, not a store det-estimator made",
        files={"empty.sqlite": ""},
    ),
    BadInput(
        "an empty --store",
        ("--store", "", "experiment", "list"),
        "argument --store: must name the store's database file, not ''",
    ),
    BadInput(
        "a blank --store after the action",
        ("experiment", "create", "{ok}", "{dir}", "--store", " "),
        "argument --store: must name the store's database file, not ' '",
    ),
    BadInput(
        "a store that is a folder",
        ("--store", "{dir}/folder.sqlite", "experiment", "list"),
        "it is a directory",
        files={"folder.sqlite/x": ""},
    ),
    BadInput(
        "a store that is a device",
        ("--store", "/dev/null", "experiment", "list"),
        "/dev/null as a det-estimator store: it is not a regular file",
    ),
    BadInput(
        "a store that is not a database",
        ("--store", "{dir}/corrupt.sqlite", "experiment", "list"),
        "file is not a database",
        files={"corrupt.sqlite": "this is not SQLite\n" * 100},
    ),
    BadInput(
        "a store damaged past its first page",
        ("--store", "{dir}/damaged.sqlite", "experiment", "list"),
        "Its file is damaged",
        prepare=_damaged_store,
    ),
    BadInput(
        "a store of a newer det-estimator",
        ("--store", "{dir}/newer.sqlite", "experiment", "list"),
        "made by a newer det-estimator",
        prepare=_newer_schema_store,
    ),
    BadInput(
        "another application's SQLite database as the store, to list",
        ("--store", "{dir}/places.sqlite", "experiment", "list"),
        "places.sqlite is an SQLite database that det-estimator did not make (its tables: moz_places)",
        prepare=_foreign_database,
    ),
    BadInput(
        "another application's SQLite database as the store, to create an experiment in",
        ("--store", "{dir}/places.sqlite", "experiment", "create", "{ok}", "{dir}"),
        "det-estimator leaves it as it is. Give the --store (or DET_ESTIMATOR_STORE) of a det-estimator store",
        prepare=_foreign_database,
    ),
    BadInput(
        "a copy of a store, to create an experiment in",
        ("--store", "{dir}/copy.sqlite", "experiment", "create", "{ok}", "{dir}"),
        "copy.sqlite store detach",
        prepare=_copied_store,
    ),
    BadInput(
        "a copy of a store, to resume an experiment",
        ("--store", "{dir}/copy.sqlite", "experiment", "resume", "1"),
        "is a copy of the store",
        prepare=_copied_store,
    ),
    BadInput(
        "detach a store that is no copy",
        ("--store", "{store}", "store", "detach"),
        "it is a store of its own already, and `store detach` has nothing to do",
    ),
    BadInput(
        "store copy from a store that does not exist",
        ("store", "copy", "{dir}/missing.sqlite", "{dir}/new.sqlite"),
        "missing.sqlite: there is no experiment store there",
    ),
    BadInput(
        "store copy into a store that holds an experiment",
        ("store", "copy", "{dir}/original.sqlite", "{store}"),
        "holds 1 experiment(s) and 0 job(s): `store copy` copies into a new or empty store only",
        prepare=_copied_store,
    ),
    BadInput(
        "store copy from a copy of a store, which does not own its folders",
        ("store", "copy", "{dir}/copy.sqlite", "{dir}/new.sqlite"),
        "its checkpoint folders belong to that store, and cannot move to another",
        prepare=_copied_store,
    ),
    BadInput(
        "store copy of a store into itself",
        ("store", "copy", "{store}", "{store}"),
        "SRC and DST are the same store",
    ),
    BadInput(
        "store copy given --store as well",
        ("--store", "{store}", "store", "copy", "{store}", "{dir}/new.sqlite"),
        "`store copy` names its two stores as SRC and DST, and uses no other",
    ),
    BadInput(
        "store copy into a database URL of a scheme other than postgresql (its password not shown)",
        ("store", "copy", "{store}", "mysql://bob:s3cret@db.example/team"),
        "DST mysql://bob:***@db.example/team is a database URL of the scheme mysql, not a store",
    ),
    BadInput(
        "a database URL of a scheme other than postgresql as the store (its password not shown)",
        ("--store", "mysql://bob:s3cret@db.example:3306/team", "experiment", "list"),
        "--store mysql://bob:***@db.example:3306/team is a database URL of the scheme mysql, not a store. Expected "
        "the path of an SQLite file",
    ),
    BadInput(
        "a PostgreSQL URL that names no database",
        ("--store", "postgresql://bob:s3cret@db.example", "experiment", "create", "{ok}", "{dir}"),
        "--store postgresql://bob:***@db.example names no database.",
    ),
    BadInput(
        "a PostgreSQL store where no server listens (its password not shown)",
        ("--store", "postgresql://bob:s3cret@127.0.0.1:1/team", "experiment", "create", "{ok}", "{dir}"),
        "Cannot reach the store postgresql://bob:***@127.0.0.1:1/team: connection failed",
    ),
    BadInput(
        "a store under /proc",
        ("--store", "/proc/det-estimator/store.sqlite", "experiment", "create", "{ok}", "{dir}"),
        "there is no folder /proc/det-estimator to make the store in",
    ),
]
