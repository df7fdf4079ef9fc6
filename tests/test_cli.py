import json
import subprocess
import sys
from pathlib import Path

import pytest

from env.config import default_config, save_config

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args)], capture_output=True, text=True, cwd=ROOT
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_generate_render_evaluate_score(tmp_path):
    config = tmp_path / "cfg.yaml"
    save_config(default_config(num_instances=16, seed=2), config)
    cli("generate", "--config", config, "--out", tmp_path / "i.jsonl", "--report", tmp_path / "r.json")
    instances = [json.loads(line) for line in (tmp_path / "i.jsonl").read_text().splitlines()]
    assert len(instances) == 16
    cli("generate", "--config", config, "--out", tmp_path / "again.jsonl", "--workers", "2")
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "i.jsonl").read_bytes()

    rows = []
    for k, inst in enumerate(instances):
        plan = "\n".join(f"Agent {i}: {', '.join(m)}" for i, m in enumerate(inst["solution"]))
        rows.append({"id": inst["id"], "response": f"<answer>\n{plan}\n</answer>" if k % 2 else "??"})
    (tmp_path / "resp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = cli(
        "evaluate",
        "--instances",
        tmp_path / "i.jsonl",
        "--responses",
        tmp_path / "resp.jsonl",
        "--out",
        tmp_path / "v.jsonl",
    )
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [v["valid"] for v in verdicts] == [bool(k % 2) for k in range(16)]
    assert {
        "id",
        "valid",
        "optimal",
        "soc_optimal",
        "makespan",
        "sum_of_costs",
        "failure",
        "failure_agent",
        "failure_step",
        "reward",
    } <= set(verdicts[0])
    assert "parse_error" in out.stdout

    text = cli("render", "--instances", tmp_path / "i.jsonl", "--id", instances[3]["id"], "--solution").stdout
    assert "letters: their goals" in text
    cli("render", "--instances", tmp_path / "i.jsonl", "--solution", "--format", "gif", "--out", tmp_path / "x.gif")
    assert (tmp_path / "x.gif").stat().st_size > 0
    prompt = cli("render", "--instances", tmp_path / "i.jsonl", "--format", "prompt").stdout
    assert "<answer>" in prompt


def test_benchmark_score_prints_the_table(tmp_path):
    from env.benchmark import BENCHMARK
    from env.instance import read_instances
    from env.prompt import format_answer

    rows = [
        {"id": i.id, "response": format_answer(i.solution)} for i in read_instances(BENCHMARK.path) if i.num_agents == 3
    ]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cli("benchmark", "score", tmp_path / "r.jsonl", "--by-wait", "--out", tmp_path / "t.json")
    assert "| 3 | 100.00/100.00" in result.stdout and "| 5 | - | - | 0.00/0.00" in result.stdout
    assert "no response; counted as failures" in result.stderr
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["all"]["3"]["sum"] == {"acc": 100.0, "opt": 100.0}


def test_bad_inputs_give_clear_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sizes:\n  3: {data_ratio: 1.0, hole_ratio: 0.7, wait_ratio: 0.5}\n")
    result = cli("generate", "--config", bad, "--out", tmp_path / "i.jsonl", check=False)
    assert result.returncode == 2 and "sizes.3.hole_ratio" in result.stderr and "0.6" in result.stderr
    result = cli("config", "check", bad, check=False)
    assert result.returncode == 2
    projected = cli("config", "project", bad).stdout
    assert "hole_ratio: 0.6" in projected
    (tmp_path / "r.jsonl").write_text('{"id": 1}\n')
    result = cli("benchmark", "score", tmp_path / "r.jsonl", check=False)
    assert result.returncode == 2 and "string 'id'" in result.stderr


def test_training_commands_reject_a_bad_config_before_starting_anything(tmp_path):
    bad = tmp_path / "train.yaml"
    bad.write_text(
        "model: m\nenv: {sizes: {3: {data_ratio: 1.0, hole_ratio: 0.2, wait_ratio: 0.5}}}\ngrpo: {groups: 4}\n"
    )
    for command in (["train"], ["sft", "--out", tmp_path / "out"]):
        result = cli(*command, "--config", bad, check=False)
        assert result.returncode == 2 and "grpo.groups: unknown field" in result.stderr
    demo = ROOT / "configs" / "cpu-demo.yaml"
    for assignment, reason in (("grpo.learing_rate=1e-5", "grpo.learing_rate: unknown field"),
                               ("grpo.learning_rate", "expected KEY=VALUE")):  # fmt: skip
        result = cli("run", demo, "--out", tmp_path / "run", "--set", assignment, check=False)
        assert result.returncode == 2 and reason in result.stderr and not (tmp_path / "run").exists()


def test_eval_takes_a_run_folder_as_its_policy_now_and_refuses_other_folders(tmp_path):
    import typer

    from cli.training import _model_folder

    run = tmp_path / "run"
    (run / "checkpoints" / "step-4" / "model").mkdir(parents=True)
    (run / "run_config.yaml").write_text("model: m\n")
    result = cli("eval", "--model", run, check=False)  # a checkpoint being written: no state.json yet
    assert result.returncode == 2 and "without a checkpoint yet" in " ".join(result.stderr.split())  # unwrapped
    (run / "checkpoints" / "step-4" / "state.json").write_text(json.dumps({"round": 1, "step": 0}))
    (run / "checkpoints" / "step-4" / "model" / "config.json").write_text("{}")
    assert _model_folder(run) == run / "checkpoints" / "step-4" / "model"
    assert _model_folder(ROOT / "models" / "tiny-test") == ROOT / "models" / "tiny-test"
    result = cli("eval", "--model", tmp_path, check=False)
    assert result.returncode == 2 and "neither a model folder" in " ".join(result.stderr.split())
    with pytest.raises(typer.Exit):
        _model_folder(tmp_path / "missing")
