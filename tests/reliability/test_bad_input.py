"""Bad input, fuzzed with hypothesis: config files, engineer answers and policy plans of any shape become
a clear error or a recorded failure category, never an escaped exception; and nothing in a model's
answer is executed or reaches anything but the environment config's fields."""

import ast
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.engineer import FIXED_FIELDS, EngineerConfig, decide, parse_proposal
from actors.engineer_context import EngineerInputs
from actors.settings import load_run_config, load_train_config
from env.config import ConfigError, EnvConfig, default_config, load_config, parse_config
from env.evaluate import FAILURE_CATEGORIES, evaluate
from env.stats import FailureTable
from tune.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers(-(10**9), 10**9) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
config_keys = st.sampled_from(["sizes", "num_agents", "num_instances", "seed", "data_ratio", "hole_ratio", "rounds"])
config_like = st.dictionaries(config_keys | st.text(max_size=8), json_values, max_size=6)
yaml_text = st.one_of(
    st.text(max_size=300),
    config_like.map(lambda data: yaml.safe_dump(data, allow_unicode=True)),
    st.sampled_from(["sizes: [", "a: b: c", "- 1\n- 2", "!!python/object/apply:os.system ['true']", "\t\x00", ""]),
)


# ------------------------------------------------------------------------------------------------
# Config files


@FUZZ
@given(text=yaml_text)
def test_any_config_file_loads_or_gives_a_clear_error(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text)
    for load in (load_config, load_train_config, load_run_config, load_sweep):
        try:
            loaded = load(path)
        except ConfigError as error:
            assert str(error).strip(), "an error must say what is wrong"
            continue
        assert loaded is not None


@FUZZ
@given(data=json_values)
def test_any_data_validates_or_names_the_bad_fields(data):
    try:
        config = parse_config(data)
    except ConfigError as error:
        assert "environment config" in str(error) or ":" in str(error)
    else:
        assert isinstance(config, EnvConfig)


def test_a_config_with_unknown_fields_is_refused_with_their_names(tmp_path):
    path = tmp_path / "extra.yaml"
    path.write_text(default_config().to_yaml() + "reward_scale: 10\n")
    with pytest.raises(ConfigError, match="reward_scale"):
        load_config(path)


# ------------------------------------------------------------------------------------------------
# The engineer's answers


@pytest.fixture(scope="module")
def inputs():
    return EngineerInputs(round=0, config=default_config(num_agents=3, num_instances=500, seed=7),
                          validation=FailureTable())  # fmt: skip


def answers():
    """Free text, JSON/YAML of any shape (fenced or not), and configs with fields the engineer must not set."""
    data = st.one_of(config_like, st.fixed_dictionaries({"sizes": json_values}, optional={"x": json_values}))
    as_text = st.one_of(
        data.map(json.dumps),
        data.map(lambda d: f"Here it is:\n```json\n{json.dumps(d)}\n```"),
        data.map(lambda d: "```yaml\n" + yaml.safe_dump(d) + "```"),
    )
    return st.one_of(st.text(max_size=400), as_text, st.tuples(st.text(max_size=50), as_text).map("".join))


@FUZZ
@given(answer=answers())
def test_any_engineer_answer_becomes_a_legal_config_or_the_previous_one(inputs, answer):
    settings_ = EngineerConfig(backend="policy", retries=1)
    decision = decide(settings_, inputs, ask=lambda prompt, schema: answer)
    assert isinstance(decision.config, EnvConfig)
    parse_config(decision.config.to_dict())  # legal under the strict schema
    for name in FIXED_FIELDS:
        assert getattr(decision.config, name) == getattr(inputs.config, name)
    if decision.fallback:
        assert decision.config == inputs.config and decision.notes


def test_an_answer_cannot_reach_the_reward_the_validation_set_or_paths(inputs, tmp_path):
    """Everything but the environment config's size knobs is dropped (and noted) or kept fixed."""
    hostile = {
        "sizes": {"4": {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.0}},
        "num_agents": 9, "num_instances": 10**9, "seed": 1,
        "reward": {"valid": 100}, "validation": {"per_cell": 0}, "run_dir": str(tmp_path / "elsewhere"),
        "model": "/etc", "grpo": {"learning_rate": 1}, "__class__": "os.system",
    }  # fmt: skip
    decision = decide(EngineerConfig(backend="policy"), inputs, ask=lambda prompt, schema: json.dumps(hostile))
    assert set(decision.config.to_dict()) == {"sizes", "num_agents", "num_instances", "seed"}
    assert (decision.config.num_agents, decision.config.num_instances, decision.config.seed) == (3, 500, 7)
    assert list(decision.config.sizes) == [4]
    notes = " ".join(decision.notes)
    for field in ("reward", "validation", "run_dir", "model", "grpo", "num_agents", "num_instances", "seed"):
        assert field in notes
    assert not (tmp_path / "elsewhere").exists()


def test_yaml_tags_in_an_answer_are_data_never_code(tmp_path):
    marker = tmp_path / "executed"
    for tag in ("!!python/object/apply:os.system", "!!python/object/apply:subprocess.call"):
        answer = f"```yaml\nsizes: {tag} [['touch', '{marker}']]\n```\n"
        parse_proposal(answer)
        parse_proposal(answer.replace("```yaml\n", "").replace("```", ""))
    assert not marker.exists()


def test_no_project_code_evaluates_or_unsafely_deserialises_text():
    """Static check over the project's own sources: no eval/exec/compile, no yaml.load without a safe
    loader, no shell commands built from strings."""
    banned_calls = {"eval", "exec", "compile", "__import__"}
    problems = []
    for path in ROOT.glob("*/**/*.py"):
        if path.parts[len(ROOT.parts)] in {".venv", "tests", "runs"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            owner = getattr(node.func, "value", None)
            owner = owner.id if isinstance(owner, ast.Name) else ""
            if isinstance(node.func, ast.Name) and name in banned_calls:
                problems.append(f"{path}:{node.lineno}: {name}()")
            if owner == "yaml" and name in {"load", "load_all", "unsafe_load", "full_load"}:
                problems.append(f"{path}:{node.lineno}: yaml.{name}()")
            if any(k.arg == "shell" and getattr(k.value, "value", False) for k in node.keywords):
                problems.append(f"{path}:{node.lineno}: shell=True")
    assert not problems, problems


# ------------------------------------------------------------------------------------------------
# The policy's plans


plan_words = st.sampled_from(["UP", "DOWN", "LEFT", "RIGHT", "WAIT", "up", "NORTH", "", "0", "-1", "STAY"])
plan_lines = st.lists(
    st.tuples(st.integers(-2, 12), st.lists(plan_words, max_size=12)).map(lambda a: f"Agent {a[0]}: {', '.join(a[1])}"),
    max_size=12,
)
plans = st.one_of(
    st.text(max_size=500),
    plan_lines.map("\n".join),
    plan_lines.map(lambda lines: "<answer>\n" + "\n".join(lines) + "\n</answer>"),
    st.tuples(st.text(max_size=40), plan_lines, st.text(max_size=40)).map(
        lambda t: f"{t[0]}<answer>{chr(10).join(t[1])}</answer>{t[2]}"
    ),
)


@FUZZ
@given(response=plans, pick=st.integers(0, 10**6))
def test_any_response_gets_a_verdict_with_a_known_failure_category(small_instances, response, pick):
    instance = small_instances[pick % len(small_instances)]
    verdict = evaluate(instance, response)
    if verdict.valid:
        assert verdict.failure is None and verdict.sum_of_costs is not None
    else:
        assert verdict.failure in FAILURE_CATEGORIES
        assert verdict.detail
