"""Checkpoint folders of a run: ``checkpoints/step-000012/`` holding

- ``model/``: the policy in Hugging Face format (transformers and vLLM load it),
- ``deepspeed/``: every rank's DeepSpeed state (weights, optimizer), ``rng-rank*.pt``: torch RNG states,
- ``buffer.pkl``: the buffer's failure table, taken steps and batches drawn ahead,
- ``state.json``: the counters, written last: a folder without it is incomplete and ignored.

The newest complete one is where a run resumes. Files are written to a temporary name and renamed, so a
write that fails (disk full, a killed process) leaves an incomplete folder that is ignored, and the
previous checkpoint is only removed once a newer one is complete. A checkpoint that is complete but
unreadable (corrupt files) makes ``Trainer.resume`` fall back to the one before it.
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


class CheckpointError(RuntimeError):
    """A run directory whose checkpoints cannot be written or read."""


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


def write(folder: Path, state: TrainState, buffer_state: dict, keep: int) -> None:
    """Finish a checkpoint whose model and optimizer files the learners wrote into ``folder``; then drop
    all but the ``keep`` newest complete ones."""
    try:
        _write_atomic(folder / "buffer.pkl", pickle.dumps(buffer_state))
        _write_atomic(folder / "state.json", json.dumps(asdict(state), indent=1).encode())
    except OSError as error:
        raise CheckpointError(
            f"could not write checkpoint {folder}: {error}; the previous checkpoint ({latest(folder.parent.parent)}) "
            "is kept"
        ) from error
    for old in complete(folder.parent.parent)[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def complete(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoint folders (those with ``state.json``), newest first."""
    folders = Path(run_dir, "checkpoints").glob("step-*")
    return sorted((f for f in folders if (f / "state.json").exists()), reverse=True)


def latest(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder, or None."""
    folders = complete(run_dir)
    return folders[0] if folders else None


def final_model(run_dir: str | Path) -> Path | None:
    """The run's policy now, in Hugging Face format: the newest checkpoint's ``model/``, or ``kept/model``
    when the validation guard undid the round that checkpoint ends (``revert_below_start``: the learners and
    the deployment went back to the kept state, which no checkpoint holds until the next one)."""
    from actors.run_dir import RunDir

    newest = latest(run_dir)
    if newest is None:
        return None
    state = json.loads((newest / "state.json").read_text())
    if state["step"] == 0 and RunDir(run_dir).round(state["round"] - 1).undone():
        return RunDir(run_dir).kept / "model"
    return newest / "model"


def read(folder: Path) -> tuple[TrainState, dict]:
    """A checkpoint's counters and buffer state; ``CheckpointError`` if they are unreadable."""
    try:
        state = TrainState(**json.loads((folder / "state.json").read_text()))
        with open(folder / "buffer.pkl", "rb") as source:
            return state, pickle.load(source)
    except (OSError, ValueError, TypeError, EOFError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"checkpoint {folder} is unreadable: {type(error).__name__}: {error}") from error
