"""Faults on the real stack (local Ray, vLLM-CPU, DeepSpeed-CPU, tiny model): a learner rank, the Serve
replica and the engineer killed mid-work, a corrupt checkpoint, a full disk and an unwritable run
directory. Each run ends where an uninterrupted run with the same seed ends: the same instances drawn,
the same responses sampled, every trajectory counted once. (A killed rollout worker and a killed driver
are in tests/test_training.py and tests/test_job.py.)"""

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import ray

from actors import checkpoint
from actors.checkpoint import CheckpointError
from actors.engineer import Engineer, EngineerConfig
from actors.engineer_context import EngineerInputs
from actors.job import RESTARTABLE
from actors.learner import LearnerGroupBroken
from actors.metrics import read_metrics
from actors.trainer import Trainer
from env.config import default_config
from env.stats import FailureTable
from tests.cluster import BIN
from tests.reliability.record import record
from tests.test_training import train_config

STEPS = 3


def config_for(model: str, run_dir: Path, **fields):
    """Three steps, two learner ranks, a checkpoint after every step (the last two kept)."""
    grpo = {"steps_per_round": STEPS}
    return train_config(model, run_dir, grpo=grpo, resources={"learners": 2}, checkpoint={"every_steps": 1}, **fields)


def outcome(run_dir: Path) -> dict:
    """What a finished run reached: per-step digests (instances drawn, responses sampled), counters and
    the buffer's trajectory count."""
    state, buffer = checkpoint.read(checkpoint.latest(run_dir))
    steps = [(r["global_step"], r["digests"]) for r in read_metrics(run_dir / "metrics.jsonl")]
    return {"steps": steps, "state": (state.round, state.global_step, state.version),
            "trajectories": buffer["trajectories"], "taken": sorted(buffer["taken"])}  # fmt: skip


@pytest.fixture(scope="module")
def reference(warm_model, ray_cluster, tmp_path_factory):
    """The uninterrupted run every fault is compared with: (run directory, outcome)."""
    model, _ = warm_model
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    trainer = Trainer(config_for(model, run_dir), deployment="reference")
    try:
        trainer.train_round(0, trainer.config.env)
    finally:
        trainer.shutdown()
    result = outcome(run_dir)
    assert [s for s, _ in result["steps"]] == list(range(STEPS))
    return run_dir, result


def when(condition, action, timeout_s: float = 600) -> threading.Thread:
    """Run ``action`` in the background as soon as ``condition()`` holds."""

    def watch():
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_learner_rank_killed_mid_step_stops_the_run_at_once_and_resume_completes_it(warm_model, reference, tmp_path):
    model, _ = warm_model
    config = config_for(model, tmp_path / "run")
    trainer = Trainer(config, deployment="learner-fault")
    killed = {}

    def kill_after_step_1(record_: dict) -> None:
        # Inside step 1 (global step 1): trained and published, its checkpoint not yet written. The kill is
        # made from the driver's own thread, so it lands at the same point on a fast or a loaded machine.
        if record_["global_step"] == 1:
            killed["at"] = time.monotonic()
            ray.kill(trainer.learners.actors[1])

    with pytest.raises(LearnerGroupBroken, match="--resume"):
        trainer.train_round(0, config.env, on_step=kill_after_step_1)
    detected = time.monotonic() - killed["at"]
    trainer.shutdown()
    assert checkpoint.latest(config.run_dir).name == "step-000001"

    started = time.monotonic()
    resumed = Trainer(config, deployment="learner-fault")
    try:
        assert resumed.resume() and resumed.state.global_step == 1
        resumed.train_round(0, config.env)
    finally:
        resumed.shutdown()
    recovery = time.monotonic() - started
    assert outcome(Path(config.run_dir)) == reference[1]
    record("learner rank 1 killed inside step 1, before its checkpoint (2 ranks, gloo)",
           f"LearnerGroupBroken after {detected:.1f} s (no hang in the collective); the rerun resumed from "
           "step-000001 and redid step 1: same digests, counters and trajectory count as the uninterrupted run",
           round(recovery, 1))  # fmt: skip


def replica_names(app: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{app}#")]  # fmt: skip


def test_the_serve_replica_killed_mid_generation_is_replaced_and_the_request_sent_again(
    warm_model, reference, tmp_path
):
    model, _ = warm_model
    config = config_for(model, tmp_path / "run")
    app = config.app_name("replica-fault")
    trainer = Trainer(config, deployment="replica-fault")
    killed = {}

    def kill() -> None:
        (name,) = replica_names(app)
        killed["name"], killed["at"] = name, time.monotonic()
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    def on_step(record_: dict) -> None:
        if record_["global_step"] == 1:
            killed["recovered"] = time.monotonic()
        if record_["global_step"] == 0:  # step 1's rollouts start once step 0's checkpoint is written
            first = checkpoint.latest(config.run_dir)
            when(lambda: checkpoint.latest(config.run_dir) != first, lambda: (time.sleep(0.5), kill()))

    try:
        records = trainer.train_round(0, config.env, on_step=on_step)
        recovery = killed["recovered"] - killed["at"]  # kill -> step 1 done
    finally:
        trainer.shutdown()
    assert killed and killed["name"] not in replica_names(app)
    # the kill lands in step 1's generation, or just after it (a tiny model answers in under a second): the
    # generation it interrupts, or the next one, waits for the new replica
    waited = max(r["time"]["generate"] for r in records[1:])
    assert waited > 5.0, "a generation after the kill should have waited for the new replica"
    assert outcome(Path(config.run_dir)) == reference[1]
    record("Serve replica killed during step 1's generation",
           f"Serve started a new replica, which loaded the newest published weights (version 1) before serving; "
           "the rollout workers sent their requests again (same seeds): the generation after the kill took "
           f"{waited:.0f} s; "
           "same digests, counters and trajectories as the uninterrupted run",
           round(recovery, 1))  # fmt: skip


def test_the_engineer_killed_mid_decision_is_restarted_and_decides_the_same(policy, tmp_path):
    # free-form greedy answers of the (untrained) tiny model run to max_tokens: a decision of a few seconds
    settings = EngineerConfig(backend="policy", temperature=0.0, retries=2, max_tokens=1024, structured=False)
    inputs = EngineerInputs(round=0, config=default_config(), validation=FailureTable())

    def started_engineer():
        engineer = Engineer.options(**RESTARTABLE).remote(settings, "fixture", "base")
        ray.get(engineer.__ray_ready__.remote())
        return engineer

    calm = started_engineer()
    ray.get(calm.propose.remote(inputs, str(tmp_path / "warm-up")))
    started = time.monotonic()
    expected = ray.get(calm.propose.remote(inputs, str(tmp_path / "calm")))
    takes = time.monotonic() - started
    ray.kill(calm)

    victim = started_engineer()
    pending = victim.propose.remote(inputs, str(tmp_path / "killed"))
    time.sleep(takes / 3)
    assert not ray.wait([pending], timeout=0)[0], "the decision should still be in progress"
    killed_at = time.monotonic()
    ray.kill(victim, no_restart=False)
    decision = ray.get(pending, timeout=600)
    recovery = time.monotonic() - killed_at
    ray.kill(victim)
    assert decision.answers == expected.answers and decision.config == expected.config
    assert json.loads((tmp_path / "killed" / "decision.json").read_text())["answers"] == expected.answers
    record("engineer actor killed mid-decision",
           f"Ray restarted the actor and retried propose (max_restarts/max_task_retries 2); the greedy decision "
           f"equals the uninterrupted one (a decision takes {takes:.1f} s; killed {takes / 3:.1f} s in)",
           round(recovery, 1))  # fmt: skip


def mount_tmpfs(folder: Path, size_kib: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"a full disk is simulated with a small tmpfs, which needs root: {done.stderr.decode().strip()}")


def test_a_corrupt_checkpoint_falls_back_and_a_full_disk_keeps_the_last_good_one(warm_model, reference, tmp_path):
    """The reference run's last checkpoint made unreadable: resume takes the one before and redoes the
    step. Then the disk fills: the checkpoint fails with a clear error, its partial files go, the last good
    one stays; once there is room again the checkpoint is written and the outcome is the reference's."""
    model, _ = warm_model
    run_dir = tmp_path / "disk" / "run"
    used = sum(f.stat().st_size for f in reference[0].rglob("*") if f.is_file()) // 1024
    mount_tmpfs(run_dir.parent, used + 16 * 1024)
    try:
        shutil.copytree(reference[0], run_dir)
        newest = checkpoint.latest(run_dir)
        assert newest.name == "step-000003"
        for states in (newest / "deepspeed").rglob("*model_states.pt"):
            states.write_bytes(b"not a checkpoint")
        config = config_for(model, run_dir)
        trainer = Trainer(config, deployment="disk-fault")
        try:
            started = time.monotonic()
            assert trainer.resume() and trainer.resumed_from.name == "step-000002"
            fallback = time.monotonic() - started
            filler = run_dir.parent / "filler"
            filler.write_bytes(b"\0" * max(shutil.disk_usage(run_dir).free - 256 * 1024, 0))
            with pytest.raises(CheckpointError, match="could not write checkpoint") as error:
                trainer.train_round(0, config.env)
        finally:
            trainer.shutdown()
        assert checkpoint.latest(run_dir).name == "step-000002"
        assert not (run_dir / "checkpoints" / "step-000003").exists()
        filler.unlink()
        started = time.monotonic()
        resumed = Trainer(config, deployment="disk-fault")
        try:
            assert resumed.resume() and resumed.resumed_from.name == "step-000002"
            resumed.train_round(0, config.env)
        finally:
            resumed.shutdown()
        recovery = time.monotonic() - started
        assert outcome(run_dir) == reference[1]
    finally:
        subprocess.run(["umount", "-l", str(run_dir.parent)], check=False)
    record("newest checkpoint corrupt (DeepSpeed model states overwritten)",
           "resume skipped it with a warning and loaded the one before (step-000002); step 2 redone, "
           "same outcome as the uninterrupted run", round(fallback, 1))  # fmt: skip
    record("disk full while writing a checkpoint",
           f"CheckpointError: {str(error.value)[:200]}...; the partial folder removed, step-000002 kept; after "
           "freeing space the rerun resumed there: same outcome as the uninterrupted run",
           round(recovery, 1))  # fmt: skip


def test_an_unwritable_run_directory_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = Path(__file__).resolve().parents[2] / "configs" / "cpu-demo.yaml"
    started = time.monotonic()
    done = subprocess.run([str(BIN / "envengineer"), "run", str(config), "--out", str(blocker / "run")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    message = " ".join(done.stderr.split())  # the console wraps long lines
    assert done.returncode == 2
    assert "cannot write to the run directory" in message and "Not a directory" in message
    record("run directory unwritable (a path under a file)", "exit 2 before Ray starts: "
           f"{message[:140]}", round(time.monotonic() - started, 1))  # fmt: skip
