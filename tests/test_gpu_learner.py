"""benchmarks/gpu_learner.py, the GPU check of the learner, runs the project's Learner in-process (no Ray) and
reports what docs/scaling.md quotes; here on CPU with a tiny model of the same architecture."""

import json
import subprocess
import sys
from pathlib import Path

from serving.hardware import resolve_precision

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_learner_check_trains_grpo_steps_and_reports(tmp_path):
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_learner.py"), "--out", str(tmp_path), "--shape", "tiny"]
    command += ["--steps", "2", "--prompts", "2", "--group", "4", "--prompt-tokens", "12", "--response-tokens", "20"]
    subprocess.run(
        command + ["--threads", "1", "--updates-per-batch", "2"], check=True, capture_output=True, timeout=300
    )
    report = json.loads((tmp_path / "gpu_learner.json").read_text())
    assert report["setup"]["trainable_parameters"] == report["parameters"] > 0
    assert [step["tokens"] for step in report["steps"]] == [2 * 4 * 32] * 2
    assert all(step["loss"] == step["loss"] and step["grad_norm"] > 0 for step in report["steps"])  # finite, learning
    # MFU against the matmul peak in the precision the learner resolved (bf16 only where it is native)
    assert report["precision"] == resolve_precision("native", "cpu")
    assert 0 < report["mfu"] < 1 and report["weights_gib"] > 0
    # two optimizer steps on each batch (grpo.updates_per_batch); the token counts are the batch's, once
    assert all(step["updates"] == 2 and step["train_tokens"] == 2 * 4 * 20 for step in report["steps"])
