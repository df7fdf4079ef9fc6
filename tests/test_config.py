import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from env.config import (
    RANGES,
    ConfigError,
    EnvConfig,
    RandomPin,
    default_config,
    diff,
    free_cells,
    load_config,
    min_free_cells,
    parse_config,
    project,
    random_config,
    save_config,
)


def test_yaml_round_trip(tmp_path):
    config = random_config(seed=3)
    save_config(config, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == config
    assert config.instance_counts() == load_config(tmp_path / "c.yaml").instance_counts()
    assert sum(config.instance_counts().values()) == config.num_instances


def test_bad_value_names_field_path_and_range(tmp_path):
    raw = default_config().to_dict()
    raw["sizes"][5]["hole_ratio"] = 0.9
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "sizes.5.hole_ratio" in str(error.value) and "[0.0, 0.6]" in str(error.value)


def test_unknown_field_is_an_error_not_dropped():
    raw = default_config().to_dict()
    raw["sizes"][4]["holes"] = 3
    raw["temperature"] = 1.0
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert "sizes.4.holes: unknown field" in str(error.value)
    assert "temperature: unknown field" in str(error.value)


def test_malformed_yaml_and_non_mapping(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("sizes: {3: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(path)


def test_ratios_must_sum_to_one_and_sizes_in_range():
    raw = default_config().to_dict()
    raw["sizes"][3]["data_ratio"] = 0.9
    with pytest.raises(ConfigError, match="must sum to 1"):
        parse_config(raw)
    raw = default_config().to_dict()
    raw["sizes"][11] = raw["sizes"].pop(3)
    with pytest.raises(ConfigError, match=r"sizes.11: map size must be in \[3, 10\]"):
        parse_config(raw)


def test_too_few_free_cells_for_the_agents():
    raw = {"sizes": {3: {"data_ratio": 1, "hole_ratio": 0.6, "wait_ratio": 0}}, "num_agents": 5}
    with pytest.raises(ConfigError, match="free cells"):
        parse_config(raw)


def test_projection_clamps_renormalises_and_notes():
    raw = {
        "sizes": {
            "3x3": {"data_ratio": 2, "hole_ratio": 0.9, "wait_ratio": "50%"},
            7: {"data_ratio": 2},
            12: {"data_ratio": 1},
        },
        "num_agents": 2.0,
        "learning_rate": 0.1,
    }
    config, notes = project(raw)
    assert config.sizes[3].hole_ratio == RANGES["hole_ratio"][1]
    assert config.sizes[3].wait_ratio == 0.5
    assert math.isclose(config.sizes[3].data_ratio, 0.5) and math.isclose(config.sizes[7].data_ratio, 0.5)
    text = "\n".join(notes)
    for expected in ("learning_rate: unknown field dropped", "sizes.12", "clamped", "renormalised"):
        assert expected in text


def test_projection_of_garbage_keeps_the_base():
    base = random_config(seed=1)
    for garbage in (None, "not a config", [1, 2], {"sizes": "many"}, {"sizes": {}}):
        config, notes = project(garbage, base)
        assert notes
        assert config.sizes == base.sizes


anything = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=10,
)
size_key = st.one_of(st.integers(0, 14), st.sampled_from(["4", "5x5", "6 x 6", "big"]))
knobs = st.dictionaries(
    st.sampled_from(["data_ratio", "hole_ratio", "wait_ratio", "junk"]),
    st.one_of(st.floats(-5, 5), st.integers(-3, 3), st.sampled_from(["0.3", "40%", "x"]), anything),
    max_size=4,
)
proposals = st.fixed_dictionaries(
    {},
    optional={
        "sizes": st.dictionaries(size_key, knobs | anything, max_size=9),
        "num_agents": st.one_of(st.integers(-3, 20), st.floats(-3, 20), anything),
        "num_instances": st.one_of(st.integers(-10, 10**7), anything),
        "seed": st.one_of(st.integers(-5, 2**33), anything),
        "extra": anything,
    },
)


@settings(max_examples=300, deadline=None)
@given(proposals)
def test_projection_always_yields_a_legal_config(raw):
    config, notes = project(raw, default_config())
    assert isinstance(config, EnvConfig)
    parse_config(config.to_dict())  # legal under the strict schema
    assert math.isclose(sum(k.data_ratio for k in config.sizes.values()), 1.0, abs_tol=1e-6)
    for size, k in config.sizes.items():
        if k.data_ratio > 0:
            assert free_cells(size, k.hole_ratio) >= min_free_cells(config.num_agents)
    assert project(config.to_dict(), config) == (config, [])


def test_diff_is_readable():
    a = default_config()
    raw = a.to_dict()
    raw["sizes"][5]["hole_ratio"] = 0.35
    del raw["sizes"][10]
    raw["num_agents"] = 3
    b, _ = project(raw, a)
    lines = diff(a, b)
    assert "num_agents: 2 -> 3" in lines
    assert "sizes.5.hole_ratio: 0.2 -> 0.35" in lines
    assert any(line.startswith("sizes.10: removed") for line in lines)
    assert diff(a, a) == []


def test_the_random_round_0_config_trains_on_train_agents():
    from actors.job import round0
    from actors.settings import RunConfig

    assert round0(RunConfig()).num_agents == 2
    three = round0(RunConfig(train_agents=3))
    assert three.num_agents == 3 and three.sizes == round0(RunConfig()).sizes  # the same draw, more agents
    pinned = round0(RunConfig.model_validate({"train_agents": 3, "random_pin": {"hole_ratio": 0.15}}))
    assert pinned == random_config(0, num_agents=3, pin=RandomPin(hole_ratio=0.15))
    with pytest.raises(ValidationError):
        RunConfig.model_validate({"random_pin": {"hole_ratio": 0.15, "sizes": 3}})


def test_a_pinned_knob_holds_on_every_size_and_the_others_are_drawn_as_without_the_pin():
    drawn = random_config(seed=4, num_agents=3)
    pinned = random_config(seed=4, num_agents=3, pin=RandomPin(hole_ratio=0.15))
    assert {s.hole_ratio for s in pinned.sizes.values()} == {0.15}
    for size, knobs in pinned.sizes.items():
        assert (knobs.data_ratio, knobs.wait_ratio) == (drawn.sizes[size].data_ratio, drawn.sizes[size].wait_ratio)
    uniform = random_config(seed=4, pin=RandomPin(data_ratio=0.3, wait_ratio=0.5))
    assert {(s.data_ratio, s.wait_ratio) for s in uniform.sizes.values()} == {(0.125, 0.5)}
    assert [s.hole_ratio for s in uniform.sizes.values()] == [s.hole_ratio for s in drawn.sizes.values()]
    for bad in ({"data_ratio": 0.0}, {"hole_ratio": 0.9}, {"holes": 0.1}):
        with pytest.raises(ValidationError):
            RandomPin.model_validate(bad)
