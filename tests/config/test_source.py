import pytest

from det_estimator.config import ConfigError, load_experiment_config


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as error:
        load_experiment_config(path)
    assert str(error.value) == f"experiment config: file {path} does not exist."


def test_invalid_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("searcher: {name: single\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_experiment_config(path)
    assert str(error.value).startswith(f"experiment config: {path} is not valid YAML: ")


def test_invalid_yaml_is_located_in_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nentrypoint: model_def:MyTrial\n  searcher: [\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_experiment_config(path)
    assert f'in "{path}", line 3, column 11' in str(error.value), str(error.value)
    assert "<unicode string>" not in str(error.value)


@pytest.mark.parametrize(("text", "received"), [("- a\n- b\n", "['a', 'b'] (list)"), ("", "None (NoneType)")])
def test_top_level_must_be_a_mapping(tmp_path, text, received):
    path = tmp_path / "list.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_experiment_config(path)
    assert str(error.value) == (
        f"experiment config: the top level of {path} must be a mapping of keys to values. Received: {received}"
    )


def test_duplicate_key_is_rejected(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("scheduling_unit: 10\nscheduling_unit: 20\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="found duplicate key 'scheduling_unit'"):
        load_experiment_config(path)


def test_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text(
        "entrypoint: m:T\n"
        "hyperparameters: {global_batch_size: 8}\n"
        "base: &base {name: single, metric: auc, max_length: {batches: 5}}\n"
        "searcher:\n"
        "  <<: *base\n"
        "  metric: loss\n",
        encoding="utf-8",
    )
    # `base` itself is an unknown key, which shows the anchors were parsed.
    with pytest.raises(ConfigError, match="unknown key `base`"):
        load_experiment_config(path)
    path.write_text(path.read_text().replace("base: &base", "data: &base"), encoding="utf-8")
    assert load_experiment_config(path).searcher.metric == "loss"


@pytest.mark.parametrize("levels", [150, 5000])
def test_values_nested_too_deeply_are_refused(tmp_path, levels):
    # 5000 levels exhaust PyYAML's recursive parser; 150 parse, and would go on to every recursive walk.
    path = tmp_path / "deep.yaml"
    path.write_text("name: x\ndata: {x: " + "[" * levels + "]" * levels + "}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_experiment_config(path)
    assert str(error.value) == (
        f"experiment config: {path} nests lists and mappings more than 100 levels deep. Expected a config of "
        "ordinary shape; keep deeply nested data in files that the trial reads."
    )


@pytest.mark.parametrize("text", ["name: x\n[a, b]: 1\n", "data:\n  ? {a: 1}\n  : 1\n"])
def test_a_list_or_mapping_as_a_key_is_invalid_yaml(tmp_path, text):
    path = tmp_path / "keys.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_experiment_config(path)
    assert str(error.value).startswith(f"experiment config: {path} is not valid YAML: ")
    assert "found unhashable key" in str(error.value)
