"""Checkpoint folders of a run: ``checkpoints/step-000012/`` holding

- ``model/``: the policy in Hugging Face format (transformers and vLLM load it),
- ``deepspeed/``: every rank's DeepSpeed state (weights, optimizer), ``rng-rank*.pt``: torch RNG states,
- ``buffer.pkl``: the buffer's failure table, taken steps and batches drawn ahead,
- ``state.json``: the counters, written last: a folder without it is incomplete and ignored.

``checkpoints/latest`` names the newest complete one.
"""

from __future__ import annotations

import json
import pickle
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainState:
    """Where a run is: ``step`` counts steps done in round ``round``; ``global_step`` over all rounds."""

    round: int = 0
    step: int = 0
    global_step: int = 0
    version: int = 0  # weight version the learner holds (and the deployment serves)
    extra: dict[str, Any] = field(default_factory=dict)  # for the round driver (configs, history)


def folder_for(run_dir: str | Path, global_step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{global_step:06d}"


def write(folder: Path, state: TrainState, buffer_state: dict, keep: int) -> None:
    """Finish a checkpoint whose model and optimizer files the learners wrote into ``folder``."""
    with open(folder / "buffer.pkl", "wb") as out:
        pickle.dump(buffer_state, out)
    (folder / "state.json").write_text(json.dumps(asdict(state), indent=1))
    latest = folder.parent / "latest"
    temporary = latest.with_suffix(".tmp")
    temporary.write_text(folder.name)
    temporary.replace(latest)  # atomic
    complete = sorted(p for p in folder.parent.glob("step-*") if (p / "state.json").exists())
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder, or None."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if pointer.exists():
        folder = pointer.parent / pointer.read_text().strip()
        if (folder / "state.json").exists():
            return folder
    return None


def read(folder: Path) -> tuple[TrainState, dict]:
    state = TrainState(**json.loads((folder / "state.json").read_text()))
    with open(folder / "buffer.pkl", "rb") as source:
        return state, pickle.load(source)
