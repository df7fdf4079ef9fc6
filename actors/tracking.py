"""Experiment tracking: the numbers ``metrics.jsonl`` holds, also sent to Weights & Biases and/or MLflow.

Each tracker is off unless its section is in the config (``tracking: {wandb: {...}, mlflow: {...}}``).
``Tracker.start`` checks every configured tracker before any training (not installed, bad URI: a
``TrackingError`` saying which); once running, a tracker that fails is reported once as a warning and
left out from then on. Nothing is lost: ``metrics.jsonl`` and the run folder stay the record.

What is logged: the run config as parameters (a run resumed with changed settings keeps the first values
as MLflow parameters, which cannot change, and adds the new ones as tags ``resumed.<key>``); every GRPO
step's record (flattened: ``reward_mean``, ``train/loss``, ``failures/hole``, ``time/generate``, ...) at its
global step; each round's validation rates, failure breakdown and the engineer's decision (the diff as
text); the report's plots, report.md and the final benchmark table as artifacts.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.metrics import flatten

log = logging.getLogger(__name__)


class TrackingError(RuntimeError):
    """A configured tracker cannot start (not installed, unreachable, bad settings)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WandbConfig(_Section):
    project: str = Field("envengineer", description="W&B project")
    entity: str | None = Field(None, description="W&B team or user (default: the API key's)")
    mode: Literal["online", "offline"] = Field("offline", description="offline writes to DIR/wandb; sync later")
    tags: list[str] = Field(default_factory=list)
    group: str | None = Field(None, description="groups runs (a sweep sets its name)")


class MlflowConfig(_Section):
    tracking_uri: str = Field(description="e.g. file:///abs/path/mlruns, http://host:5000")
    experiment: str = Field("envengineer", description="MLflow experiment name")


class TrackingConfig(_Section):
    wandb: WandbConfig | None = Field(None, description="log to Weights & Biases (off when absent)")
    mlflow: MlflowConfig | None = Field(None, description="log to MLflow (off when absent)")

    def enabled(self) -> bool:
        return self.wandb is not None or self.mlflow is not None


def _library(name: str):
    """The tracking library ``name``, or a ``TrackingError`` saying how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise TrackingError(
            f"tracking.{name} is set but {name} is not installed: scripts/install cpu,dev,tracking"
        ) from error


class _Wandb:
    def __init__(self, config: WandbConfig, name: str, params: dict[str, Any], folder: Path, group: str | None):
        wandb = _library("wandb")
        folder.mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(project=config.project, entity=config.entity, mode=config.mode, name=name,
                                  group=config.group or group, tags=config.tags, config=params, dir=str(folder),
                                  resume="allow", id=_run_id(name, folder))  # fmt: skip
        except Exception as error:  # noqa: BLE001 - wandb raises many kinds; any means it cannot start
            raise TrackingError(f"wandb could not start: {error}") from error

    def metrics(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def text(self, key: str, value: str, step: int) -> None:
        self.run.log({key: value}, step=step)

    def artifact(self, path: Path) -> None:
        self.run.save(str(path), base_path=str(path.parent), policy="now")

    def finish(self) -> None:
        self.run.finish()


class _Mlflow:
    def __init__(self, config: MlflowConfig, name: str, params: dict[str, Any], folder: Path, group: str | None):
        mlflow = _library("mlflow")
        if "://" not in config.tracking_uri or config.tracking_uri.startswith("file:"):
            # a file store named in the config is wanted as it is (MLflow 3 asks for an opt-in to use one)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            self.client = mlflow.MlflowClient(tracking_uri=config.tracking_uri)
            found = self.client.get_experiment_by_name(config.experiment)
            experiment = found.experiment_id if found else self.client.create_experiment(config.experiment)
            runs = self.client.search_runs([experiment], f"tags.`mlflow.runName` = '{name}'", max_results=1)
            self.run_id = runs[0].info.run_id if runs else self.client.create_run(experiment, run_name=name).info.run_id
            if group:
                self.client.set_tag(self.run_id, "envengineer.group", group)
            logged = self.client.get_run(self.run_id).data.params  # a resumed run's, from its first start
            for key, value in list(flatten_params(params).items())[:500]:
                if key not in logged:
                    self.client.log_param(self.run_id, key, value)
                elif logged[key] != value:  # MLflow parameters cannot change: the resumed value is a tag
                    self.client.set_tag(self.run_id, f"resumed.{key}", value)
        except Exception as error:  # noqa: BLE001 - bad URI, server down, permissions: it cannot start
            raise TrackingError(f"mlflow could not start at {config.tracking_uri!r}: {error}") from error

    def metrics(self, values: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key.replace("/", "."), value, now, step) for key, value in values.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def text(self, key: str, value: str, step: int) -> None:
        self.client.log_text(self.run_id, value, f"{key.replace('/', '_')}_{step}.txt")

    def artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


def _run_id(name: str, folder: Path) -> str:
    """A W&B run id stable for a run folder, so a resumed run continues the same tracked run."""
    import hashlib

    return hashlib.sha256(f"{name}:{folder.resolve()}".encode()).hexdigest()[:16]


def flatten_params(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as ``a.b.c`` -> text (MLflow parameters are flat strings)."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat |= flatten_params(value, name + ".")
        else:
            flat[name] = str(value)[:500]
    return flat


class Tracker:
    """The configured trackers of one run; every call goes to each of them (a failing one is dropped)."""

    def __init__(self, backends: dict[str, Any]):
        self.backends = backends

    @classmethod
    def start(
        cls,
        config: TrackingConfig | None,
        name: str,
        params: dict[str, Any],
        folder: str | Path,
        group: str | None = None,
    ) -> Tracker:
        """Start every configured tracker (``TrackingError`` if one cannot); ``folder`` is the run folder,
        ``group`` groups the runs of a sweep (W&B group, MLflow tag ``envengineer.group``)."""
        backends: dict[str, Any] = {}
        if config is not None and config.wandb is not None:
            backends["wandb"] = _Wandb(config.wandb, name, params, Path(folder), group)
        if config is not None and config.mlflow is not None:
            backends["mlflow"] = _Mlflow(config.mlflow, name, params, Path(folder), group)
        return cls(backends)

    def _each(self, what: str, call) -> None:
        for name, backend in list(self.backends.items()):
            try:
                call(backend)
            except Exception as error:  # noqa: BLE001 - tracking must never stop training
                log.warning("%s failed to log %s (%s); it is off for the rest of the run", name, what, error)
                self.backends.pop(name)

    def step(self, record: dict[str, Any]) -> None:
        """A GRPO step's record (``actors.trainer.step_record``) at its global step."""
        values = flatten({k: v for k, v in record.items() if k not in ("digests",)})
        self._each("a step", lambda b: b.metrics(values, record["global_step"]))

    def round(self, k: int, step: int, summary: dict[str, Any], decision=None) -> None:
        """Round ``k``'s validation summary and, if made, the engineer's decision, at global step ``step``."""
        values = {f"validation/{key}": v for key, v in flatten(summary).items()} | {"round": float(k)}
        if decision is not None:
            values |= {
                "engineer/changed": float(bool(decision.changes)),
                "engineer/kept_previous": float(decision.fallback is not None),
            }
        self._each("a round", lambda b: b.metrics(values, step))
        if decision is not None:
            text = "\n".join(decision.changes) or f"no change ({decision.fallback or 'same config'})"
            self._each("a decision", lambda b: b.text(f"engineer/round_{k}", text, step))

    def samples(self, text: str, step: int) -> None:
        """What the policy wrote at ``step`` (a logged group as ``actors.sample_view.describe_group`` prints
        it): W&B's ``samples`` key, MLflow's ``samples_<step>.txt``."""
        self._each("samples", lambda b: b.text("samples", text, step))

    def artifacts(self, paths: list[Path]) -> None:
        for path in paths:
            if path.exists():
                self._each(f"artifact {path.name}", lambda b, p=path: b.artifact(p))

    def finish(self) -> None:
        self._each("the end of the run", lambda b: b.finish())
