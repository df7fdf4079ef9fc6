"""The main job end to end on the real stack: 2 rounds with the tiny warm-started policy as its own
engineer, killed in round 1 and resumed without redoing round 0."""

import json
import os
import signal
import subprocess
import time

import yaml

from actors.checkpoint import TrainState
from actors.job import guard_round
from actors.metrics import read_metrics
from tests.cluster import BIN
from tests.reliability.record import record as record_fault
from tests.test_cli import cli


def job_config(model: str) -> dict:
    return {
        "model": model,
        "warm_start": False,
        "rounds": 2,
        "env": {
            "sizes": {s: {"data_ratio": 0.5, "hole_ratio": 0.2, "wait_ratio": 0.3} for s in (3, 4)},
            "num_agents": 2,
            "num_instances": 100,
        },
        "serving": {"max_model_len": 4096},
        "grpo": {"prompts_per_step": 4, "group_size": 4, "steps_per_round": 3, "max_tokens": 160},
        "checkpoint": {"every_steps": 1},
        "engineer": {
            "backend": "policy",
            "preset": "V6",
            "max_tokens": 256,
            "probe": {"per_size": 2, "max_tokens": 160},
        },  # fmt: skip
        "validation": {"agents": [2], "per_cell": 1, "max_tokens": 160},
        "benchmark": {"agents": [3], "per_cell": 1, "max_tokens": 160},
    }


def test_two_rounds_killed_in_round_one_resume_without_redoing_round_zero(warm_model, ray_cluster, tmp_path):
    model, _ = warm_model
    config, out = tmp_path / "run.yaml", tmp_path / "run"
    tracking = {"wandb": {"mode": "offline", "project": "tests"},
                "mlflow": {"tracking_uri": (tmp_path / "mlruns").as_uri(), "experiment": "job"}}  # fmt: skip
    grpo = job_config(model)["grpo"] | {"log_samples": 1}
    config.write_text(
        yaml.safe_dump(job_config(model) | {"tracking": tracking, "revert_below_start": True, "grpo": grpo})
    )
    command = [str(BIN / "envengineer"), "run", str(config), "--out", str(out)]
    environment = os.environ | {"RAY_ADDRESS": ray_cluster}
    with open(tmp_path / "first.log", "w") as log:
        first = [*command, "--set", "checkpoint.keep=3"]  # a setting changed on the command line
        driver = subprocess.Popen(first, env=environment, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 600
        while not any(r["round"] == 1 for r in read_metrics(out / "metrics.jsonl")):
            assert driver.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job did not reach round 1"
            time.sleep(0.2)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    round0 = (out / "round_0" / "validation.json").read_text()
    decision = json.loads((out / "round_0" / "engineer" / "decision.json").read_text())
    assert decision["backend"] == "policy" and (out / "round_1" / "env_config.yaml").exists()
    probed = decision["probes"][0]  # the proposal scored on the served policy before it was adopted
    assert probed["verdicts"] and sum(n for _, n in probed["sizes"].values()) == len(probed["verdicts"])
    assert (out / "round_0" / "engineer" / "probe_instances.jsonl").exists()

    refused = subprocess.run(command, env=environment, capture_output=True, text=True)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    assert yaml.safe_load((out / "run_config.yaml").read_text())["checkpoint"]["keep"] == 3
    started = time.monotonic()
    rerun = subprocess.run([*command, "--resume"], env=environment, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    finished = time.monotonic() - started
    assert (out / "round_0" / "validation.json").read_text() == round0  # round 0 not redone
    steps = [(r["round"], r["step"]) for r in read_metrics(out / "metrics.jsonl")]
    assert steps == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    starts = [json.loads(line) for line in (out / "learner.jsonl").read_text().splitlines()]
    assert len(starts) == 2 and starts[0]["from_step"] == 0 and starts[1]["from_step"] >= 3
    assert {r["precision"] for r in starts} == {"fp32"}  # the default, whatever the CPU
    provenance = [json.loads(line) for line in (out / "provenance.jsonl").read_text().splitlines()]
    assert [p["from_step"] for p in provenance] == [s["from_step"] for s in starts]  # the code of each start
    assert all(p["packages"]["ray"] and "commit" in p["code"] for p in provenance)
    for name in (
        "round_0/env_config.yaml", "round_0/engineer/prompt.md", "round_0/engineer/response.txt",
        "round_1/env_config.yaml", "round_1/validation.json", "final/benchmark.json", "report.md",
        "plots/validation_by_size.png", "plots/config_evolution.png", "plots/failures.png", "plots/reward.png",
        "start/validation.json", "start/final/benchmark.json", "kept/state.json",
    ):  # fmt: skip
        assert (out / name).exists(), name
    start = json.loads((out / "start" / "validation.json").read_text())["summary"]["valid_rate"]
    for k in (0, 1):  # the validation guard judged both rounds against the start
        guard = json.loads((out / f"round_{k}" / "guard.json").read_text())
        measured = json.loads((out / f"round_{k}" / "validation.json").read_text())["summary"]["valid_rate"]
        assert guard["floor"] == start and guard["valid_rate"] == measured
        assert guard["reverted"] == (measured < start) == ("back_to_step" in guard)
    table = json.loads((out / "final" / "benchmark.json").read_text())
    assert "| 3 |" in table["markdown"] and "| 3 |" in rerun.stdout
    report = (out / "report.md").read_text()
    assert "![validation](plots/validation_by_size.png)" in report
    assert "round 1 done: validation valid" in rerun.stderr  # the one-line summary of a round
    assert "resuming with settings that differ" in rerun.stderr and "checkpoint.keep: 3 -> 2" in rerun.stderr
    assert_tracked(tmp_path / "mlruns", out)
    shown = cli("samples", out, "--step", 5).stdout  # the logged group with its board, scored again
    assert "step 5 (round 1) of steps 0..5, 1 group(s)" in shown and "digits: agents (starts)" in shown
    assert "**Before RL (the starting policy)**" in report and "**After RL**" in report  # both tables
    assert "## Provenance" in report and report.count("\n- from step ") == 2  # the start and the resume
    compared = subprocess.run([str(BIN / "envengineer"), "compare", str(out / "start"), str(out)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert compared.returncode == 0 and "\n| 3 | 24 |" in compared.stdout, compared.stderr[-2000:]  # 8 sizes x 3
    record_fault("driver (envengineer run) SIGKILLed in round 1 of 2",
           "`--resume` kept round 0 (validation, engineer decision, round 1 config), resumed training from the "
           "last checkpoint: every step once, then validation, benchmark and report", round(finished, 1),
           "none (steps after the last checkpoint are redone with the same draws)")  # fmt: skip


def assert_tracked(mlruns, out) -> None:
    """MLflow holds every step's numbers (the last value logged at a step is the one in metrics.jsonl: steps
    redone after the resume are logged again), each round's validation, the params and the report; the
    offline W&B run is the same run across the resume."""
    import mlflow

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # reading the file store the run wrote
    client = mlflow.MlflowClient(tracking_uri=mlruns.as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("job").experiment_id])
    logged = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "reward_mean")}
    assert logged == {r["global_step"]: r["reward_mean"] for r in read_metrics(out / "metrics.jsonl")}
    rounds = client.get_metric_history(run.info.run_id, "validation.valid_rate")
    assert len({m.value for m in rounds}) >= 1 and len(rounds) >= 2
    assert run.data.params["grpo.steps_per_round"] == "3"
    # resumed without the first start's --set: the parameter keeps its first value, the new one is a tag
    assert run.data.params["checkpoint.keep"] == "3" and run.data.tags["resumed.checkpoint.keep"] == "2"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "report.md" in artifacts and "samples_5.txt" in artifacts  # what the policy wrote at the last step
    assert len({p.name.split("-")[-1] for p in (out / "wandb").glob("offline-run-*")}) == 1  # one run id


def test_eval_scores_an_openai_compatible_endpoint(policy, serve_port, tmp_path):
    out = tmp_path / "scores.json"
    command = [
        str(BIN / "envengineer"), "eval", "--model", "openai:fixture", "--suite", "validation", "--agents", "2",
        "--per-cell", "1", "--max-tokens", "32", "--base-url", f"http://127.0.0.1:{serve_port}/fixture/v1",
        "--out", str(out),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| 2 |" in result.stdout
    scores = json.loads(out.read_text())
    assert len(scores["verdicts"]) == 8 * 3 and set(scores["table"]) == {"2"}
    assert scores["suite"] == "validation" and scores["per_cell"] == 1 and scores["model"] == "openai:fixture"

    # `envengineer compare` pairs it with another policy's scores on the same instances: here a copy with one
    # more instance solved
    first = next(row for row in scores["verdicts"] if not row["valid"])
    first["valid"] = first["optimal"] = True
    (tmp_path / "better.json").write_text(json.dumps(scores))
    compared = subprocess.run([str(BIN / "envengineer"), "compare", str(out), str(tmp_path / "better.json")],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "| 2 | 24 |" in compared.stdout and "| 1/0 (p 1) | 1/0 (p 1) |" in compared.stdout


def test_engineer_asks_an_openai_compatible_endpoint_under_the_schema(policy, serve_port, small_instances):
    from actors.engineer import EngineerConfig, decide, openai_backend
    from actors.engineer_context import EngineerInputs
    from env.config import EnvConfig, default_config
    from env.evaluate import evaluate
    from env.stats import FailureTable

    table = FailureTable()
    for instance in small_instances[:12]:
        table.add(instance, evaluate(instance, "no plan"))
    settings = EngineerConfig(
        backend="openai", openai_base_url=f"http://127.0.0.1:{serve_port}/fixture/v1", openai_model="fixture",
        max_tokens=512, preset="V2",
    )  # fmt: skip
    decision = decide(
        settings, EngineerInputs(round=0, config=default_config(), validation=table), openai_backend(settings)
    )
    assert decision.answers and decision.fallback is None  # schema-constrained: always a usable config
    EnvConfig.model_validate(decision.config.to_dict())


class GuardedTrainer:
    """What ``actors.job.guard_round`` uses of a Trainer: where it stands, and what it asked for."""

    def __init__(self, round_: int, step: int = 0):
        self.state = TrainState(round=round_, step=step)
        self.calls: list[str] = []

    def keep(self) -> None:
        self.calls.append("keep")

    def revert(self) -> int:
        self.calls.append("revert")
        return 12


def test_the_guard_undoes_a_round_below_the_start_and_redoes_itself_only_at_the_rounds_end(tmp_path):
    path = tmp_path / "guard.json"
    ended = GuardedTrainer(round_=3)  # round 2 has just ended
    record = guard_round(path, ended, 2, valid_rate=0.30, floor=0.33, log=lambda line: None)
    assert ended.calls == ["revert"] and record == json.loads(path.read_text())
    assert record == {"round": 2, "valid_rate": 0.30, "floor": 0.33, "reverted": True, "back_to_step": 12}

    resumed = GuardedTrainer(round_=3)  # killed before the next checkpoint: that one holds round 2's weights
    guard_round(path, resumed, 2, valid_rate=0.30, floor=0.33, log=lambda line: None)
    assert resumed.calls == ["revert"]

    later = GuardedTrainer(round_=3, step=1)  # round 3 has begun from the reverted state: nothing to redo
    assert guard_round(path, later, 2, valid_rate=0.30, floor=0.33, log=lambda line: None) == record
    assert later.calls == []

    at_floor = GuardedTrainer(round_=3)
    assert not guard_round(path, at_floor, 2, valid_rate=0.33, floor=0.33, log=lambda line: None)["reverted"]
    assert at_floor.calls == ["keep"]


def test_a_kept_state_cut_off_between_its_renames_is_put_back(tmp_path):
    from types import SimpleNamespace

    from actors.trainer import Trainer

    old = tmp_path / "kept.old"  # keep() renamed kept/ away and stopped before the new copy took its place
    old.mkdir()
    (old / "state.json").write_text(json.dumps({"global_step": 12}))
    kept = Trainer._kept(SimpleNamespace(run_dir=tmp_path))
    assert kept == tmp_path / "kept" and json.loads((kept / "state.json").read_text()) == {"global_step": 12}
    assert not old.exists()
