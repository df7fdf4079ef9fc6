"""Where a run or a sweep stands, read from its folder alone (``envengineer status``): how many GRPO steps and
rounds are done, the newest checkpoint, the validation per round, the benchmark before and after, the learners'
precision and code, and the command that continues it. Reads files only; works while the run is going.
"""

from __future__ import annotations

import json
import shlex
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from actors.checkpoint import latest
from actors.metrics import read_metrics
from actors.run_dir import RunDir, benchmark_sums, read_json, validation_rates

SWEEP_RECORD = "sweep.json"  # written by `envengineer tune`: the sweep file and --set assignments it ran with


@dataclass
class RunStatus:
    """One run folder's progress and scores; rates and Sums in %."""

    path: Path
    # plan, from run_config.yaml
    model: str
    seed: int
    engineer: str
    rounds: int
    steps_per_round: int
    # progress
    steps_done: int  # GRPO steps in metrics.jsonl
    checkpoint_step: int | None  # the global step the newest complete checkpoint resumes after
    step_seconds: float | None  # median wall time of a GRPO step
    idle_seconds: float  # since the folder's newest write
    finished: bool  # final/benchmark.json written
    # scores
    validation: list[tuple[str, float, float, bool]] = field(default_factory=list)  # (round, valid, optimal, undone)
    start_sums: dict[str, float] = field(default_factory=dict)  # agents -> benchmark acc. Sum before RL
    final_sums: dict[str, float] = field(default_factory=dict)  # agents -> after the last round
    precision: str = ""
    code: str = ""

    @property
    def steps_total(self) -> int:
        return self.rounds * self.steps_per_round

    @property
    def rounds_validated(self) -> int:
        return sum(1 for name, *_ in self.validation if name != "start")

    @property
    def state(self) -> str:
        if self.finished:
            return "finished"
        if self.steps_done == 0 and not self.validation:
            return "starting" if self.idle_seconds < 600 else "stopped before its first step"
        where = f"at step {self.steps_done} of {self.steps_total}"
        return f"running {where}" if self.idle_seconds < 600 else f"stopped {where}"


def _sums(benchmark: Path) -> dict[str, float]:
    return {agents: sums["acc"] for agents, sums in benchmark_sums(benchmark).items()}


def _validation(path: Path) -> tuple[float, float] | None:
    rates = validation_rates(path)
    return None if rates is None else (100 * rates[0], 100 * rates[1])


def _newest_write(folder: Path) -> float:
    """The newest modification time of the folder's files."""
    times = [p.stat().st_mtime for p in folder.rglob("*") if p.is_file()]
    return max(times, default=folder.stat().st_mtime)


def sweep_of(run: RunDir) -> Path | None:
    """The sweep folder a trial's run folder belongs to (``SWEEP/runs/<trial>/``), or None."""
    sweep = run.path.parent.parent
    return sweep if run.path.parent.name == "runs" and is_sweep(sweep) else None


def is_sweep(path: Path) -> bool:
    """Whether ``path`` is a sweep folder: it holds what ``envengineer tune`` writes there (a checkout's
    ``tune/`` package is not Tune's ``tune/``)."""
    return any(p.exists() for p in (path / SWEEP_RECORD, path / "tune" / "tuner.pkl", path / "shared" / "start"))


def start_of(run: RunDir) -> RunDir:
    """Where the run's starting policy was scored: its own ``start/``, or its sweep's ``shared/start/``."""
    sweep = sweep_of(run)
    return RunDir(sweep / "shared" / "start") if sweep and not run.start.validation.exists() else run.start


def run_status(path: str | Path, now: float | None = None) -> RunStatus:
    """The status of the run folder ``path`` (it must hold ``run_config.yaml``)."""
    run = RunDir(path)
    start = start_of(run)
    config = yaml.safe_load(run.run_config.read_text()) or {}
    steps = read_metrics(run.metrics)
    newest = latest(run.path)
    status = RunStatus(
        path=run.path,
        model=str(config.get("model", "tiny")),
        seed=int(config.get("seed", 0)),
        engineer=str((config.get("engineer") or {}).get("backend", "policy")),
        rounds=int(config.get("rounds", 3)),
        steps_per_round=int((config.get("grpo") or {}).get("steps_per_round", 0)),
        steps_done=len(steps),
        checkpoint_step=json.loads((newest / "state.json").read_text())["global_step"] if newest else None,
        step_seconds=statistics.median(s["time"]["wall"] for s in steps) if steps else None,
        idle_seconds=(now or time.time()) - _newest_write(run.path),
        finished=run.benchmark.exists(),
        start_sums=_sums(start.benchmark),
        final_sums=_sums(run.benchmark),
    )
    if (scored := _validation(start.validation)) is not None:
        status.validation.append(("start", *scored, False))
    for r in run.rounds(validated=True):
        status.validation.append((f"r{r.index}", *_validation(r.validation), r.undone()))
    status.precision, status.code = run.precision(), run.code()
    return status


def resume_command(status: RunStatus) -> str:
    """The command that continues the run: its sweep's, for a sweep trial."""
    if sweep := sweep_of(RunDir(status.path)):
        return sweep_resume_command(sweep)
    folder = shlex.quote(str(status.path))
    return f"envengineer run {folder}/run_config.yaml --out {folder} --resume"


def describe_run(status: RunStatus) -> list[str]:
    """The status as lines of text."""
    lines = [
        f"{status.path}: {status.state} (last write {_ago(status.idle_seconds)})",
        f"  plan: {status.model}, seed {status.seed}, engineer {status.engineer}, "
        f"{status.rounds} rounds x {status.steps_per_round} GRPO steps",
    ]
    progress = f"  steps: {status.steps_done} / {status.steps_total}, "
    progress += f"rounds validated {status.rounds_validated} / {status.rounds}"
    if status.checkpoint_step is not None:
        progress += f", newest checkpoint after step {status.checkpoint_step}"
    lines.append(progress)
    left = status.steps_total - status.steps_done
    if status.step_seconds is not None and left > 0 and not status.finished:
        lines.append(
            f"  a step takes {status.step_seconds:.0f} s (median): ~{left * status.step_seconds / 60:.0f} min "
            "of GRPO steps left, plus validation and the benchmark"
        )
    if status.precision or status.code:
        lines.append(f"  learners: {status.precision or '?'}; code: {status.code or '?'}")
    if status.validation:
        cells = [
            f"{name} {valid:.1f}/{optimal:.1f}" + (" (undone)" if undone else "")
            for name, valid, optimal, undone in status.validation
        ]
        lines.append("  validation valid/optimal %: " + ", ".join(cells))
    if status.start_sums or status.final_sums:
        lines.append("  benchmark acc. Sum % by agents: " + _sums_text(status.start_sums, status.final_sums))
    if not status.finished:
        lines.append(f"  continue: {resume_command(status)}")
    return lines


def _sums_text(start: dict[str, float], final: dict[str, float]) -> str:
    parts = []
    for agents in sorted(final or start, key=int):  # the final table's agent counts once there is one
        if agents in start and agents in final:
            parts.append(f"{agents}: {start[agents]:.1f} -> {final[agents]:.1f} ({final[agents] - start[agents]:+.1f})")
        else:
            parts.append(f"{agents}: {(final or start)[agents]:.1f}")
    return "; ".join(parts)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def describe_sweep(path: str | Path, now: float | None = None) -> list[str]:
    """A sweep folder's trials, a line each, and the command that continues the sweep."""
    path = Path(path)
    trials = sorted(p for p in (path / "runs").glob("*") if RunDir(p).run_config.exists())
    record = path / SWEEP_RECORD
    planned = _planned_trials(record)
    lines = [f"{path}: {len(trials)} trial folders" + (f" of {len(planned)} planned" if planned else "")]
    start = RunDir(path / "shared" / "start")
    if start.benchmark.exists():
        lines.append("  before RL: benchmark acc. Sum % by agents: " + _sums_text(_sums(start.benchmark), {}))
    finished = 0
    for folder in trials:
        status = run_status(folder, now)
        finished += status.finished
        sums = _sums_text(status.start_sums, status.final_sums) if status.final_sums else ""
        last = status.validation[-1] if status.validation else None
        valid = f", validation {last[0]} {last[1]:.1f}%" if last else ""
        lines.append(f"  {folder.name}: {status.state}{valid}" + (f"; {sums}" if sums else ""))
    for name in planned:
        if not (path / "runs" / name).exists():
            lines.append(f"  {name}: not started")
    if planned and finished == len(planned):
        lines.append("  all trials finished")
    else:
        lines.append(f"  continue: {sweep_resume_command(path)}")
    return lines


def _planned_trials(record: Path) -> list[str]:
    """The trial names the recorded sweep file plans, or none when it is not recorded or no longer loads."""
    if not record.exists():
        return []
    from env.config import ConfigError
    from tune.spec import load_sweep, trial_name

    data = read_json(record)
    try:
        sweep = load_sweep(data["sweep_file"], data["set"])
    except ConfigError:
        return []
    return [trial_name(v, s) for v, s in sweep.configs]


def write_sweep_record(out: Path, sweep_file: Path, assignments: list[str]) -> None:
    """Record the sweep file (as given, relative to the working directory) and the --set assignments."""
    (out / SWEEP_RECORD).write_text(json.dumps({"sweep_file": str(sweep_file), "set": assignments}, indent=1) + "\n")


def sweep_resume_command(path: Path) -> str:
    """``envengineer tune`` with the recorded sweep file and assignments (a placeholder for sweeps from before
    the record)."""
    if not (path / SWEEP_RECORD).exists():
        folder = shlex.quote(str(path))
        return f"envengineer tune SWEEP.yaml --out {folder} --resume (SWEEP.yaml: the sweep file it ran)"
    data = read_json(path / SWEEP_RECORD)
    parts = ["envengineer tune", shlex.quote(data["sweep_file"]), "--out", shlex.quote(str(path)), "--resume"]
    parts += [f"--set {shlex.quote(a)}" for a in data["set"]]
    return " ".join(parts)
