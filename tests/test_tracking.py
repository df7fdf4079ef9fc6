"""Experiment tracking with the real libraries writing locally: W&B in offline mode, MLflow's file store."""

import json
import logging
import sys
from pathlib import Path

import pytest

from actors.engineer import Decision
from actors.tracking import Tracker, TrackingConfig, TrackingError

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

RECORD = {"round": 0, "step": 0, "global_step": 0, "reward_mean": 0.5, "valid_rate": 0.25,
          "failures": {"hole": 0.5}, "train": {"loss": 0.1, "entropy": 1.2, "skipped": False},
          "time": {"generate": 2.0}, "digests": [{"instances": "ab"}]}  # fmt: skip
PARAMS = {"seed": 3, "grpo": {"learning_rate": 2e-5, "group_size": 8}, "model": "models/base-v1"}


def config(tmp_path, **sections) -> TrackingConfig:
    both = {"wandb": {"project": "test", "mode": "offline", "tags": ["t"]},
            "mlflow": {"tracking_uri": (tmp_path / "mlruns").as_uri(), "experiment": "tests"}}  # fmt: skip
    return TrackingConfig.model_validate({k: v for k, v in both.items() if k in sections or not sections})


def wandb_records(path):
    """The records of an offline W&B run file: a 7-byte header, then a LevelDB-style log (32 KiB blocks of
    records with a 7-byte header: checksum, length, type 1 full / 2 first / 3 middle / 4 last)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data, position, pending, records = path.read_bytes(), 7, b"", []
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        _, length, kind = struct.unpack("<IHB", data[position : position + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # block padding
            position += left
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def mlflow_run(tmp_path, name: str):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("tests")
    (run,) = client.search_runs([experiment.experiment_id], f"tags.`mlflow.runName` = '{name}'")
    return client, run


def test_both_trackers_hold_the_steps_rounds_params_and_artifacts(tmp_path):
    folder = tmp_path / "run"
    tracker = Tracker.start(config(tmp_path), "run-a", PARAMS, folder, group="sweep-x")
    for step in range(3):
        tracker.step(RECORD | {"global_step": step, "reward_mean": 0.5 + step})
    tracker.samples("hand: 3x3, 2 agents\n  sample 0: reward 1.50, valid, optimal", 2)  # beside step 2's curves
    decision = Decision(round=0, backend="fixed", config=None, changes=["sizes.3.data_ratio: 0.2 -> 0.4"])
    tracker.round(0, 3, {"valid_rate": 0.4, "optimal_rate": 0.3, "failures": {"hole": 0.1}}, decision)
    (folder / "report.md").write_text("# report\n")
    tracker.artifacts([folder / "report.md", folder / "missing.png"])
    tracker.finish()

    client, run = mlflow_run(tmp_path, "run-a")
    history = client.get_metric_history(run.info.run_id, "reward_mean")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 1.5), (2, 2.5)]
    assert client.get_metric_history(run.info.run_id, "train.entropy")[0].value == 1.2
    assert client.get_metric_history(run.info.run_id, "validation.valid_rate")[0].value == 0.4
    assert run.data.params["grpo.learning_rate"] == "2e-05" and run.data.tags["envengineer.group"] == "sweep-x"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "report.md" in artifacts and any(p.startswith("engineer_round_0") for p in artifacts)
    assert "reward 1.50" in Path(client.download_artifacts(run.info.run_id, "samples_2.txt", str(tmp_path))).read_text()

    (offline,) = (folder / "wandb").glob("offline-run-*")
    records = wandb_records(next(offline.glob("run-*.wandb")))  # what `wandb sync` would upload
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]  # fmt: skip
    assert [(h["_step"], h["reward_mean"]) for h in history[:3]] == [(0, 0.5), (1, 1.5), (2, 2.5)]
    assert history[2]["samples"].endswith("valid, optimal")
    assert history[3]["validation/valid_rate"] == 0.4 and history[3]["engineer/changed"] == 1
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run_record.run_group == "sweep-x" and "learning_rate" in str(run_record.config)
    assert (offline / "files" / "report.md").exists()


def test_a_tracker_that_cannot_start_is_a_clear_error_before_training(tmp_path, monkeypatch):
    bad = TrackingConfig.model_validate({"mlflow": {"tracking_uri": "nosuchscheme://x"}})
    with pytest.raises(TrackingError, match="mlflow could not start"):
        Tracker.start(bad, "run-b", PARAMS, tmp_path)
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(TrackingError, match="not installed.*tracking"):
        Tracker.start(config(tmp_path, wandb=True), "run-c", PARAMS, tmp_path)
    assert Tracker.start(TrackingConfig(), "run-d", PARAMS, tmp_path).backends == {}  # off by default


def test_a_tracker_failing_mid_run_warns_once_and_the_others_go_on(tmp_path, caplog):
    class Broken:
        def metrics(self, values, step):
            raise ConnectionError("server gone")

    tracker = Tracker.start(config(tmp_path, mlflow=True), "run-e", PARAMS, tmp_path)
    tracker.backends = {"wandb": Broken(), **tracker.backends}
    with caplog.at_level(logging.WARNING):
        tracker.step(RECORD)
        tracker.step(RECORD | {"global_step": 1})
    assert list(tracker.backends) == ["mlflow"]
    assert sum("server gone" in r.message for r in caplog.records) == 1
    tracker.finish()
    client, run = mlflow_run(tmp_path, "run-e")
    assert len(client.get_metric_history(run.info.run_id, "reward_mean")) == 2
