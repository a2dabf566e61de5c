"""A config ported from the reference runs: its cluster-only keys are ignored with one warning, its
environment variables reach the worker processes, its ``max_restarts`` is kept."""

import json
import textwrap
import warnings

import pytest

from det_estimator.config import ConfigError, load_experiment_config

# Written as the reference's own examples and docs write these keys.
CLUSTER_KEYS_YAML = """
environment:
  image:
    cpu: determinedai/environments:py-3.8-pytorch-1.12-tf-2.11-cpu-0.19.4
    cuda: determinedai/environments:cuda-11.3-pytorch-1.12-tf-2.11-gpu-0.19.4
  environment_variables:
    - PORTED_GREETING=hello world
    - PORTED_EQUATION=a=b
  pod_spec:
    apiVersion: v1
    kind: Pod
    metadata:
      labels:
        team: ported
    spec:
      containers:
        - name: determined-container
          resources:
            limits:
              memory: 8Gi
  force_pull_image: false
  registry_auth:
    username: owner
    password: owner-password
  add_capabilities:
    - IPC_LOCK
  drop_capabilities:
    - NET_RAW
  proxy_ports:
    - proxy_port: 8265
      proxy_tcp: true
bind_mounts:
  - host_path: /data
    container_path: /data
    read_only: true
tensorboard_storage:
  type: shared_fs
  host_path: /tmp/tensorboard
profiling:
  enabled: true
  begin_on_batch: 0
  end_after_batch: null
workspace: my_workspace
project: my_project
debug: false
max_restarts: 3
resources:
  slots_per_trial: 1
  resource_pool: default
  priority: 42
  shm_size: 4000000000
  agent_label: dev
"""

IGNORED = [
    "environment.image",
    "environment.pod_spec",
    "environment.force_pull_image",
    "environment.registry_auth",
    "environment.add_capabilities",
    "environment.drop_capabilities",
    "environment.proxy_ports",
    "bind_mounts",
    "tensorboard_storage",
    "profiling",
    "workspace",
    "project",
    "debug",
    "resources.resource_pool",
    "resources.priority",
    "resources.shm_size",
    "resources.agent_label",
]


def base_yaml(**hparams) -> str:
    extra = "".join(f"  {name}: {json.dumps(value)}\n" for name, value in hparams.items())
    return (
        textwrap.dedent(
            """
        name: ported
        entrypoint: fault_trial:FaultTrial
        hyperparameters:
          global_batch_size: 8
          learning_rate: 0.01
          events_dir: events
        """
        )
        + extra
        + textwrap.dedent(
            """
        searcher:
          name: single
          metric: loss
          max_length:
            batches: 5
        scheduling_unit: 5
        checkpoint_storage:
          type: shared_fs
          host_path: checkpoints
        reproducibility:
          experiment_seed: 1
        """
        )
    )


def test_every_cluster_key_is_named_in_one_warning_and_left_out_of_the_config(tmp_path):
    path = tmp_path / "const.yaml"
    path.write_text(base_yaml() + CLUSTER_KEYS_YAML)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_experiment_config(str(path))
        load_experiment_config(str(path))  # loaded again by the same command: no second warning
    (warning,) = [w for w in caught if "cluster" in str(w.message)]
    message = str(warning.message)
    for key in IGNORED:
        assert f"`{key}` (" in message, key
    assert "environment_variables" not in message and "max_restarts" not in message
    assert config.max_restarts == 3
    assert config.environment.variables_for("cpu") == {"PORTED_GREETING": "hello world", "PORTED_EQUATION": "a=b"}
    saved = config.to_dict()
    for key in ("bind_mounts", "tensorboard_storage", "profiling", "workspace", "project", "debug"):
        assert key not in saved
    assert saved["resources"] == {"slots_per_trial": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what the workers load back warns no more
        assert load_experiment_config(saved) == config


@pytest.mark.parametrize(
    ("variables", "cpu", "cuda"),
    [
        (["A=1", "B=two words"], {"A": "1", "B": "two words"}, {"A": "1", "B": "two words"}),
        ({"A": 1, "B": "x"}, {"A": "1", "B": "x"}, {"A": "1", "B": "x"}),
        ({"cpu": ["A=1"], "cuda": {"A": "2"}}, {"A": "1"}, {"A": "2"}),
        (None, {}, {}),
    ],
)
def test_environment_variables_as_the_reference_accepts_them(variables, cpu, cuda):
    raw = {
        "entrypoint": "m:T",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "environment": {"environment_variables": variables},
    }
    environment = load_experiment_config(raw).environment
    assert environment.variables_for("cpu") == cpu
    assert environment.variables_for("cuda") == cuda


@pytest.mark.parametrize(
    ("environment", "fragment"),
    [
        ({"environment_variables": ["NO_EQUALS"]}, "`environment.environment_variables[0]` must be"),
        ({"environment_variables": "A=1"}, "`environment.environment_variables` must be"),
        ({"environment_variables": {"1BAD": "x"}}, "each name a valid variable name"),
        ({"imagee": "x"}, "unknown key `environment.imagee`"),
    ],
)
def test_bad_environment_sections_are_refused(environment, fragment):
    raw = {
        "entrypoint": "m:T",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "environment": environment,
    }
    with pytest.raises(ConfigError) as raised:
        load_experiment_config(raw)
    assert fragment in str(raised.value)


@pytest.mark.parametrize("value", [-1, 1.5, "five"])
def test_a_bad_max_restarts_is_refused(value):
    raw = {
        "entrypoint": "m:T",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": value,
    }
    with pytest.raises(ConfigError, match="max_restarts"):
        load_experiment_config(raw)


def test_max_restarts_defaults_to_five_as_the_reference():
    raw = {
        "entrypoint": "m:T",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
    }
    assert load_experiment_config(raw).max_restarts == 5


def test_a_ported_config_runs_with_one_warning_and_its_variables_in_the_worker(det, context):
    config = context.directory / "const.yaml"
    hparams = {"record_environment": ["PORTED_GREETING", "PORTED_EQUATION"]}
    config.write_text(base_yaml(**hparams) + CLUSTER_KEYS_YAML)
    result = det.ok("experiment", "create", config, context.directory)
    assert result.stderr.count("det-estimator: warning: experiment config: ignored") == 1, result.stderr
    assert "`bind_mounts` (" in result.stderr and "`environment.image` (" in result.stderr
    seen = json.loads((context.directory / "events" / "environment-rank0.json").read_text())
    assert seen == {"PORTED_GREETING": "hello world", "PORTED_EQUATION": "a=b"}
    (experiment,) = det.json("experiment", "list")
    described = det.json("experiment", "describe", experiment["id"])
    assert described["state"] == "COMPLETED"
    assert described["config"]["max_restarts"] == 3
