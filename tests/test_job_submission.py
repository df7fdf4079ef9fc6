"""The way users run on a cluster, on a real local head: ``ray job submit`` of a tiny main-job run
(dashboard on 127.0.0.1), its logs read back; meanwhile the node's Prometheus export carries the run's
live metrics and the dashboard's state API lists its actors by role."""

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml
from ray._private.runtime_env.packaging import GCS_STORAGE_MAX_SIZE, _zip_files

from tests.cluster import BIN, end_session, free_port, start_ray_head
from tests.test_job import job_config
from tune.sweep import merge

ROOT = Path(__file__).resolve().parents[1]
EXPECTED_METRICS = {
    "ray_envengineer_round", "ray_envengineer_step", "ray_envengineer_reward", "ray_envengineer_valid_rate",
    "ray_envengineer_optimal_rate", "ray_envengineer_tokens_per_second", "ray_envengineer_weight_version",
    "ray_envengineer_engineer_decisions_total",
}  # fmt: skip


def scrape(url: str) -> dict[str, set[str]]:
    """envengineer metric names on a Prometheus endpoint -> the label sets seen (as text)."""
    found: dict[str, set[str]] = {}
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("ray_envengineer_"):
            name, _, rest = line.partition("{")
            found.setdefault(name, set()).add(rest.rpartition("}")[0])
    return found


@pytest.fixture(scope="module")
def submitted_job(warm_model, tmp_path_factory):
    """A head with the dashboard and a metrics port, Serve started on a free port, and one tiny run
    (2 rounds x 1 step, the fixed engineer) submitted with ``ray job submit``; scraped while it runs."""
    model, _ = warm_model
    folder = tmp_path_factory.mktemp("submit")
    dashboard, metrics = free_port(), free_port()
    head, address = start_ray_head(Path(tempfile.mkdtemp(prefix="ray-")), 4, dashboard, metrics)
    try:
        serve = f"import ray; ray.init(address={address!r}); from serving.deployment import start_serve; "
        serve += f"start_serve('127.0.0.1', {free_port()})"
        subprocess.run([sys.executable, "-c", serve], check=True, capture_output=True, timeout=120)
        fixed = {"backend": "fixed", "probe": None}  # no probe: the decision leaves the config unchanged
        config = merge(job_config(model), {"grpo": {"steps_per_round": 1}, "engineer": fixed})
        (folder / "run.yaml").write_text(yaml.safe_dump(config | {"label": "submitted", "score_start": False}))
        url = f"http://127.0.0.1:{dashboard}"
        seen: dict[str, set[str]] = {}
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                try:
                    for name, labels in scrape(f"http://127.0.0.1:{metrics}/metrics").items():
                        seen.setdefault(name, set()).update(labels)
                except OSError:
                    pass
                done.wait(2)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        entrypoint = f"envengineer run {folder / 'run.yaml'} --out {folder / 'run'}"
        submit = [
            str(BIN / "ray"),
            "job",
            "submit",
            "--address",
            url,
            "--working-dir",
            str(ROOT),
            "--",
            *entrypoint.split(),
        ]
        started = time.monotonic()
        for _ in range(10):  # the head's job agent registers a few seconds after the dashboard answers
            result = subprocess.run(submit, capture_output=True, text=True, timeout=1200)
            if "No available agent" not in result.stderr:
                break
            time.sleep(2)
        seconds = time.monotonic() - started
        time.sleep(5)  # one more scrape after the end
        done.set()
        poller.join()
        actors = subprocess.run(
            [str(BIN / "ray"), "list", "actors", "--address", url, "--format", "json", "--limit", "1000"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        yield {"submit": result, "url": url, "metrics": seen, "actors": actors, "folder": folder, "seconds": seconds}
    finally:
        end_session(head)


def test_ray_job_submit_runs_the_main_job_and_its_logs_read_back(submitted_job):
    result, url = submitted_job["submit"], submitted_job["url"]
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    job_id = next(line.split("'")[1] for line in result.stdout.splitlines() if "submitted successfully" in line)
    status = subprocess.run(
        [str(BIN / "ray"), "job", "status", "--address", url, job_id], capture_output=True, text=True
    )
    assert "succeeded" in status.stdout.lower(), status.stdout + status.stderr
    logs = subprocess.run([str(BIN / "ray"), "job", "logs", "--address", url, job_id], capture_output=True, text=True)
    assert "round 0 done: validation valid" in logs.stdout and "round 1 done: validation valid" in logs.stdout
    assert "| 3 |" in logs.stdout  # the benchmark table
    assert (submitted_job["folder"] / "run" / "final" / "benchmark.json").exists()


def test_the_run_exports_live_metrics_and_names_its_actors(submitted_job):
    seen = submitted_job["metrics"]
    assert EXPECTED_METRICS <= set(seen), sorted(seen)
    assert all(any('run="submitted"' in labels for labels in seen[name]) for name in EXPECTED_METRICS)
    splits = " ".join(seen["ray_envengineer_valid_rate"])
    assert 'split="train"' in splits and 'split="validation"' in splits
    assert any('outcome="unchanged"' in labels for labels in seen["ray_envengineer_engineer_decisions_total"])
    actors = submitted_job["actors"]
    assert actors.returncode == 0, actors.stderr[-2000:]
    names = {actor.get("name") for actor in json.loads(actors.stdout)}
    assert {"buffer", "rollout-0", "rollout-1", "learner-0", "engineer", "validator"} <= names, sorted(map(str, names))


def readme_cluster_lines() -> tuple[list[str], str]:
    """The README's `export` lines and its `ray job submit ... -- \\` line, from the first shell block of
    "Run on a cluster"."""
    section = (ROOT / "README.md").read_text().split("## Run on a cluster", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    exports = [line for line in lines if line.startswith("export ")]
    (submit,) = [line for line in lines if line.startswith("ray job submit")]
    return exports, submit


def test_the_readme_submit_line_works_as_written_against_a_head_with_token_auth(submitted_job):
    """The README's own `export RAY_AUTH_MODE=token` and `ray job submit` line (only the port changed to the
    test head's, and a short entrypoint after its `--`), from the checkout root: without the export the head
    refuses it, with it the job runs."""
    exports, submit = readme_cluster_lines()
    assert exports == ["export RAY_AUTH_MODE=token"]
    port = submitted_job["url"].rsplit(":", 1)[1]
    command = submit.replace("127.0.0.1:8265", f"127.0.0.1:{port}").removesuffix("\\").strip()
    assert command.endswith(" --working-dir . --")
    command += " envengineer --help"
    environment = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # the test's token file stays
    environment["PATH"] = f"{BIN}:{environment.get('PATH', '')}"
    refused = subprocess.run(command, shell=True, cwd=ROOT, env=environment, capture_output=True, text=True)
    assert refused.returncode != 0 and "no authentication token was found" in refused.stderr
    for _ in range(10):
        ran = subprocess.run(f"{exports[0]} && {command}", shell=True, cwd=ROOT, env=environment,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
        if "No available agent" not in ran.stderr:
            break
        time.sleep(2)
    assert ran.returncode == 0 and "succeeded" in ran.stdout + ran.stderr, (ran.stdout + ran.stderr)[-3000:]


def test_the_code_ray_job_submit_ships_stays_under_rays_request_limit(tmp_path):
    """`--working-dir .` zips the checkout minus .gitignore and .rayignore; the head refuses a request over
    100 MiB. The models the jobs read go along, the git history and the sweep records do not."""
    package = tmp_path / "package.zip"
    _zip_files(str(ROOT), [], str(package), include_gitignore=True, logger=logging.getLogger("package"))
    assert package.stat().st_size < 0.8 * GCS_STORAGE_MAX_SIZE, f"{package.stat().st_size / 2**20:.1f} MiB"
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
    assert "models/base-v1/model.safetensors" in names and "configs/cpu-demo.yaml" in names
    assert not any(name.startswith((".git/", "docs/results/")) for name in names)
