"""A sweep's specification: the sweep file's schema, the run config of every (variant, seed) trial, and where
its files go (``DIR/runs/<variant>-s<seed>/``, ``DIR/shared/start/``).

Read by the sweep runner (``tune.sweep``) and by the summary (``tune.summary``); imports neither.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actors.run_dir import RunDir
from actors.settings import RunConfig, set_values
from actors.tracking import TrackingConfig
from env.config import ConfigError, format_errors


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base: str = Field(description="run config every trial starts from (relative to the sweep file)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="merged into the base for every trial")
    variants: dict[str, dict[str, Any]] = Field(
        min_length=1, description="name -> overrides merged on top (engineer backend, preset, context, ...)"
    )
    seeds: list[int] = Field([0], min_length=1, description="each variant runs once per seed")
    max_concurrent_trials: int | None = Field(None, ge=1, description="none = as many as the cluster holds")
    shared_warm_start: bool = Field(True, description="warm-start once in the driver; trials start from it")
    score_start: bool = Field(
        True, description="score the policy all trials start from once, before RL (validation and benchmark)"
    )
    tracking: TrackingConfig | None = Field(
        None, description="W&B / MLflow for every trial: one tracked run per trial, grouped by the sweep's folder"
    )


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in, nested mappings key by key."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def trial_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


def shared_start(out: Path) -> RunDir:
    """The scores of the policy every trial starts from (``DIR/shared/start``)."""
    return RunDir(out / "shared" / "start")


def trial_dir(out: Path, variant: str, seed: int) -> RunDir:
    return RunDir(out / "runs" / trial_name(variant, seed))


class Sweep:
    """A loaded sweep: its settings and the run config of every (variant, seed)."""

    def __init__(self, settings: SweepConfig, base: dict[str, Any]):
        self.settings = settings
        self.base = merge(base, settings.overrides)
        self.configs = {(v, s): self.trial_config(v, s) for v in settings.variants for s in settings.seeds}

    def trial_config(self, variant: str, seed: int, model: str | None = None) -> RunConfig:
        data = merge(self.base, self.settings.variants[variant]) | {"seed": seed, "label": trial_name(variant, seed)}
        data["score_start"] = False  # the sweep scores the shared starting policy once (shared/start)
        if self.settings.tracking is not None:
            data["tracking"] = self.settings.tracking.model_dump()
        if isinstance(data.get("env"), dict):
            data["env"]["seed"] = seed  # the seed draws the instances too
        if model:
            data |= {"model": model, "warm_start": False}
        try:
            return RunConfig.model_validate(data)
        except ValidationError as error:
            raise ConfigError(f"variant {variant!r}: {format_errors(error, 'run config')}") from None

    def base_config(self) -> RunConfig:
        return RunConfig.model_validate(self.base)


def load_sweep(path: str | Path, assignments: Sequence[str] = ()) -> Sweep:
    """Read a sweep YAML (with ``actors.settings.set_values``' assignments, e.g. ``seeds=[2]`` or
    ``overrides.grpo.kl_coef=0``) and check every trial's run config (unknown keys anywhere are errors)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
        if assignments:
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: expected a mapping at the top level")
            data = set_values(data, assignments)
        settings = SweepConfig.model_validate(data)
        base_path = path.parent / settings.base
        base = yaml.safe_load(base_path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    except ValidationError as error:
        raise ConfigError(f"{path}: {format_errors(error, 'sweep config')}") from None
    if not isinstance(base, dict):
        raise ConfigError(f"{base_path}: expected a mapping at the top level")
    return Sweep(settings, base)
