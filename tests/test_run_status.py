import json
import os
import shutil
from pathlib import Path

from actors.run_status import describe_run, describe_sweep, resume_command, run_status, write_sweep_record
from tests.test_cli import cli

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def table(sums: dict[int, float]) -> dict:
    """A benchmark.json reduced to what the status reads: the acc. Sum per agent count."""
    return {"table": {str(a): {"sum": {"acc": acc, "opt": acc}} for a, acc in sums.items()}}


def make_run(folder: Path, steps: int, rounds_validated: int, finished: bool = False) -> Path:
    """A run folder of 2 rounds x 4 steps as the job leaves it after ``steps`` steps."""
    (folder / "start" / "final").mkdir(parents=True)
    (folder / "run_config.yaml").write_text("model: models/base-v1\nseed: 3\nrounds: 2\ngrpo: {steps_per_round: 4}\n")
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"global_step": k, "time": {"wall": 10.0 + k}}) + "\n" for k in range(steps))
    )
    (folder / "start" / "validation.json").write_text(
        json.dumps({"summary": {"valid_rate": 0.5, "optimal_rate": 0.25}})
    )
    (folder / "start" / "final" / "benchmark.json").write_text(json.dumps(table({3: 25.0, 4: 14.0})))
    for k in range(rounds_validated):
        (folder / f"round_{k}").mkdir()
        summary = {"valid_rate": 0.4 + 0.2 * k, "optimal_rate": 0.3}
        (folder / f"round_{k}" / "validation.json").write_text(json.dumps({"summary": summary}))
        (folder / f"round_{k}" / "guard.json").write_text(json.dumps({"reverted": k == 0}))
    checkpoint = folder / "checkpoints" / f"step-{steps:06d}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "state.json").write_text(json.dumps({"global_step": steps, "round": 1, "step": 0}))
    (folder / "learner.jsonl").write_text(json.dumps({"device": "cpu", "precision": "fp32"}) + "\n")
    (folder / "provenance.jsonl").write_text(json.dumps({"code": {"commit": "0123456789abcdef", "dirty": True}}) + "\n")
    if finished:
        (folder / "final").mkdir()
        (folder / "final" / "benchmark.json").write_text(json.dumps(table({3: 31.0, 4: 13.5})))
    return folder


def test_a_stopped_run_says_where_it_stands_and_how_to_continue(tmp_path):
    (tmp_path / "tune").mkdir()  # a checkout's tune/ package beside runs/ does not make runs/ a sweep's
    run = make_run(tmp_path / "runs" / "run", steps=5, rounds_validated=1)
    status = run_status(run, now=os.path.getmtime(run / "metrics.jsonl") + 3600)  # an hour without a write
    assert (status.steps_done, status.steps_total, status.checkpoint_step) == (5, 8, 5)
    assert status.state == "stopped at step 5 of 8" and status.step_seconds == 12.0  # median of 10..14 s
    assert status.validation == [("start", 50.0, 25.0, False), ("r0", 40.0, 30.0, True)]
    assert (status.precision, status.code) == ("fp32", "01234567*")
    text = "\n".join(describe_run(status))
    assert "steps: 5 / 8, rounds validated 1 / 2, newest checkpoint after step 5" in text
    assert "~1 min of GRPO steps left" in text  # 3 steps x 12 s
    assert "validation valid/optimal %: start 50.0/25.0, r0 40.0/30.0 (undone)" in text
    assert f"continue: envengineer run {run}/run_config.yaml --out {run} --resume" in text
    assert "running" in run_status(run).state  # just written


def test_a_finished_run_shows_the_benchmark_before_and_after(tmp_path):
    run = make_run(tmp_path / "run", steps=8, rounds_validated=2, finished=True)
    text = "\n".join(describe_run(run_status(run)))
    assert text.startswith(f"{run}: finished") and "continue" not in text
    assert "benchmark acc. Sum % by agents: 3: 25.0 -> 31.0 (+6.0); 4: 14.0 -> 13.5 (-0.5)" in text


def test_a_sweep_lists_its_trials_with_the_shared_start_and_the_recorded_command(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    shutil.copytree(RESULTS / "sweep-grpo-random-shares" / "shared" / "start", sweep / "shared" / "start")
    trial = make_run(sweep / "runs" / "random-config-shares-suite-s0", steps=8, rounds_validated=2, finished=True)
    shutil.rmtree(trial / "start")  # a trial's start is the sweep's shared one
    write_sweep_record(sweep, Path("configs/sweep-grpo-random-shares.yaml"), ["seeds=[0, 2]"])
    monkeypatch.chdir(ROOT)  # the record's sweep file is relative to the working directory, as given
    lines = describe_sweep(sweep)
    assert lines[0] == f"{sweep}: 1 trial folders of 2 planned"
    assert "  before RL: benchmark acc. Sum % by agents: 3: 25.7; 4: 14.1; 5: 8.1" in lines
    assert (
        "  random-config-shares-suite-s0: finished, validation r1 60.0%; 3: 25.7 -> 31.0 (+5.3); 4: 14.1 -> 13.5 (-0.6)"
        in lines
    )
    assert "  random-config-shares-suite-s2: not started" in lines
    resume = f"envengineer tune configs/sweep-grpo-random-shares.yaml --out {sweep} --resume --set 'seeds=[0, 2]'"
    assert lines[-1] == f"  continue: {resume}"
    assert resume_command(run_status(trial)) == resume  # a trial continues with its sweep


def test_the_command_reads_committed_results_and_refuses_other_folders(tmp_path):
    shown = cli("status", RESULTS / "sweep-grpo-guard-12" / "runs" / "kl-0.1-guard-12-rounds-s0").stdout
    assert "finished" in shown and "steps: 144 / 144, rounds validated 12 / 12" in shown
    assert "3: 25.7 -> 31.1 (+5.4)" in shown  # the guard-12 row's seed 0 against the shared start
    run, trial = tmp_path / "run", RESULTS / "sweep-grpo-guard-12" / "runs" / "kl-0.1-guard-12-rounds-s0"
    run.mkdir()
    for part in ("run_config.yaml", "round_0", "round_1"):  # that run as it stood after round 1
        (shutil.copytree if (trial / part).is_dir() else shutil.copy)(trial / part, run / part)
    (run / "metrics.jsonl").write_text("".join((trial / "metrics.jsonl").read_text().splitlines(True)[:24]))
    shown = cli("status", run, "--report").stdout
    assert "running at step 24 of 144" in shown and f"report so far: {run}/report.md" in shown
    assert "| 1 | 40.3% | 34.7% | none |" in (run / "report.md").read_text()
    assert (run / "plots" / "validation_by_size.png").exists() and (run / "plots" / "reward.png").exists()
    refused = cli("status", tmp_path, check=False)
    assert refused.returncode == 2 and "neither a run folder" in " ".join(refused.stderr.split())
