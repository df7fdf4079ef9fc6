"""Training settings: one pydantic model from the YAML file to every actor (unknown keys are errors).

Every knob here ends up in a metric or a file of the run directory: GRPO knobs in ``metrics.jsonl``
(loss, clip fraction, KL, kept groups), resources in the step-time breakdown, checkpoint knobs in
``checkpoints/``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actors.engineer import EngineerConfig
from actors.tracking import TrackingConfig
from env.config import ConfigError, EnvConfig, RandomPin, SizeConfig, format_errors
from env.evaluate import RewardConfig
from serving.hardware import Precision
from serving.settings import ServingConfig


def small_maps(num_instances: int, seed: int = 0) -> EnvConfig:
    """2 agents on 3x3 and 4x4 maps, 20% holes, 30% needing a WAIT: the warm start's distribution."""
    knobs = SizeConfig(data_ratio=0.5, hole_ratio=0.2, wait_ratio=0.3)
    return EnvConfig(sizes={3: knobs, 4: knobs}, num_agents=2, num_instances=num_instances, seed=seed)


def run_namespace(label: str) -> str:
    """A Ray namespace of a run's own: its actors carry role names (``buffer``, ``rollout-0``,
    ``learner-0``, ``engineer``, ``validator``) for the dashboard that never collide with another run's."""
    return f"envengineer-{label or 'run'}-{uuid.uuid4().hex[:8]}"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraConfig(_Config):
    """LoRA adapters (peft) for the learner group: the learners train the adapters only; the deployment
    serves the merged weights; checkpoints keep both."""

    rank: int = Field(16, ge=1, description="adapter rank r")
    alpha: float = Field(32.0, gt=0, description="scaling alpha (the update is scaled by alpha / r)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="linear layers that get adapters",
    )


class GRPOConfig(_Config):
    """GRPO: groups of samples per prompt, group-relative advantages, token-level clipped ratio."""

    prompts_per_step: int = Field(16, ge=1, description="distinct instances per step (over all rollout workers)")
    group_size: int = Field(8, ge=2, description="samples per instance (G)")
    steps_per_round: int = Field(8, ge=1, description="GRPO steps in one round (K)")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature of rollouts")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(128, ge=1, description="longest response")
    learning_rate: float = Field(1e-5, gt=0.0)
    clip_low: float = Field(0.2, ge=0.0, description="ratio clipped below at 1 - clip_low")
    clip_high: float = Field(0.28, ge=0.0, description="ratio clipped above at 1 + clip_high")
    kl_coef: float = Field(0.0, ge=0.0, description="weight of the k3 KL to the initial model (0 = no reference)")
    scale_by_std: bool = Field(True, description="divide advantages by the group's reward std")
    drop_zero_variance: bool = Field(True, description="drop groups whose samples all got the same reward")
    credit: Literal["sequence", "located"] = Field(
        "sequence",
        description="located: a failing sample's negative advantage only from its first faulty move on (actors.grpo)",
    )
    negative_weight: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="scale of negative advantages (1 = GRPO; < 1 leans on the valid samples)",
    )
    refill: int = Field(
        0, ge=0, description="dynamic sampling: up to this many extra draws per step to replace groups without signal"
    )
    micro_batch_size: int = Field(16, ge=1, description="sequences per forward/backward on a learner")
    shared_prompts: bool = Field(
        True, description="compute a group's prompt once per micro-batch (same loss and gradients; actors.grpo)"
    )
    updates_per_batch: int = Field(
        1, ge=1, le=8, description="optimizer steps on each step's batch (>1: PPO-style reuse, the clip range acts)"
    )
    log_samples: int = Field(
        0, ge=0, description="groups per step whose samples (text, reward, verdict) go to samples.jsonl (0 = none)"
    )
    overlap: bool = Field(
        False, description="generate step t+1 while training step t (one step off-policy, deterministic)"
    )
    reward: RewardConfig = Field(default_factory=RewardConfig)
    lora: LoraConfig | None = Field(None, description="train LoRA adapters instead of every weight (off by default)")


class DeepSpeedConfig(_Config):
    zero_stage: int = Field(0, ge=0, le=3)
    precision: Precision = Field(
        "fp32", description="native: bf16 where the learner's device computes it natively, fp32 elsewhere"
    )
    gradient_clipping: float = Field(1.0, ge=0.0, description="max global grad norm (0 = off)")
    weight_decay: float = Field(0.0, ge=0.0)
    torch_adam: bool = Field(True, description="torch's AdamW instead of a compiled DeepSpeed Adam op")
    shm_comm: bool = Field(False, description="build DeepSpeed's CPU shared-memory all-reduce (~1 min compile)")
    compile: bool = Field(
        False, description="torch.compile the learner's model (engine.compile, dynamic shapes): slower first step"
    )


class ResourceConfig(_Config):
    rollout_workers: int = Field(2, ge=1)
    learners: int = Field(1, ge=1, description="data-parallel learner ranks (one torch.distributed group)")
    learner_cpus: float = Field(1.0, gt=0)
    learner_gpus: float = Field(0.0, ge=0)
    learner_threads: int = Field(1, ge=1, description="torch threads per learner on CPU")
    worker_cpus: float = Field(0.25, gt=0)
    max_restarts: int = Field(3, ge=0, description="restarts of a dead actor; its task is retried")


class CheckpointConfig(_Config):
    every_steps: int = Field(0, ge=0, description="also checkpoint every S steps (0 = at round ends only)")
    keep: int = Field(2, ge=1, description="checkpoints kept on disk")


class NetworkConfig(_Config):
    """Where the run listens when it starts Ray and Serve itself (a cluster's own settings win when joined)."""

    dashboard_host: str = Field("127.0.0.1", description="Ray dashboard bind address (0.0.0.0 exposes it)")
    serve_host: str = Field("127.0.0.1", description="Serve's HTTP proxy (the OpenAI route) bind address")
    serve_port: int = Field(8000, ge=1, le=65535, description="Serve's HTTP port")


class SFTConfig(_Config):
    """Warm start on solver demonstrations (prompt -> optimal plan in the answer format)."""

    env: EnvConfig = Field(default_factory=lambda: small_maps(4000, seed=1), description="the demonstrations")
    thinking: bool = Field(True, description="demonstrations think first: each agent's path as cells")
    epochs: int = Field(6, ge=1)
    batch_size: int = Field(32, ge=1)
    learning_rate: float = Field(3e-3, gt=0.0)
    warmup_steps: int = Field(50, ge=0, description="linear learning-rate warm-up")
    validation_instances: int = Field(64, ge=0, description="held-out 3x3/4x4 instances scored before and after")


class TrainConfig(_Config):
    """A training run: the policy, the round's environment, and how to train it."""

    run_dir: str = Field("runs/default", description="metrics, TensorBoard events, checkpoints")
    label: str = Field(
        "",
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]*$",
        description="run label: tags the live metrics and prefixes the Serve applications (a sweep sets one per trial)",
    )
    model: str = Field(description="local Hugging Face folder of the initial policy")
    seed: int = Field(0, ge=0, description="seed of sampling, shuffling and initialisation")
    env: EnvConfig = Field(description="the round's environment configuration")
    serving: ServingConfig = Field(
        default_factory=ServingConfig, description="how the policy is served (model and seed default to the run's)"
    )
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    deepspeed: DeepSpeedConfig = Field(default_factory=DeepSpeedConfig)
    resources: ResourceConfig = Field(default_factory=ResourceConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="W&B / MLflow (off by default)")

    def required_cpus(self) -> float:
        """Logical CPUs the run's actors reserve (Serve replicas, learners, rollout workers)."""
        serving, r = self.serving_config(), self.resources
        return serving.num_cpus * serving.num_replicas + r.learners * r.learner_cpus + r.rollout_workers * r.worker_cpus

    def app_name(self, role: str) -> str:
        """The Serve application of a role (``policy``, ``base``) in this run: unique per label."""
        return f"{self.label}-{role}" if self.label else role

    def serving_config(self) -> ServingConfig:
        """The serving section with the run's policy and seed filled in (unless the section names its own)."""
        given = self.serving.model_fields_set
        own = {"model": self.model} if "model" not in given or not self.serving.model else {}
        return self.serving.model_copy(update=own | ({} if "seed" in given else {"seed": self.seed}))


def set_values(data: dict[str, Any], assignments: Sequence[str]) -> dict[str, Any]:
    """``data`` with each ``dotted.key=VALUE`` of ``assignments`` set in it (the command line's ``--set``).
    VALUE is read as YAML data (``1e-5``, ``[3, 4]``, ``null``, ``{hole_ratio: 0.15}``); a key that is an
    integer in the file (a map size under ``env.sizes``) is matched as one. The schema then checks the result
    as it checks the file, so a misspelt key is an unknown-field error."""
    data = copy.deepcopy(data)
    for assignment in assignments:
        key, equals, text = assignment.partition("=")
        parts = key.strip().split(".")
        if not equals or not all(parts):
            raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. grpo.learning_rate=1e-5")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"--set {assignment!r}: the value is not YAML data: {error}") from None
        node = data
        for depth, part in enumerate(parts):
            if not isinstance(node, dict):
                raise ConfigError(f"--set {assignment!r}: {'.'.join(parts[:depth])} is not a section")
            name = int(part) if part not in node and part.isdigit() and int(part) in node else part
            if depth == len(parts) - 1:
                node[name] = value
            else:
                node = node.setdefault(name, {})
    return data


def changed_settings(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two nested mappings (a run's recorded config and the one
    it is resumed with), each as ``key: old -> new``."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = list(old) + [k for k in new if k not in old]
        return [line for k in keys for line in changed_settings(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def _load(schema, path: str | Path, overrides: dict[str, Any] | None, what: str, assignments: Sequence[str] = ()):
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    data = set_values(data | (overrides or {}), assignments)
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path}: {format_errors(error, what)}") from None


def load_train_config(
    path: str | Path, overrides: dict[str, Any] | None = None, assignments: Sequence[str] = ()
) -> TrainConfig:
    """Read a training YAML (with ``set_values``' assignments); relative paths in it are relative to the
    working directory."""
    return _load(TrainConfig, path, overrides, "training config", assignments)


class EvalConfig(_Config):
    """Which suite instances a scoring pass answers (greedy)."""

    agents: list[int] = Field(description="agent counts of the suite to use")
    per_cell: int | None = Field(None, ge=1, description="at most this many per (agents, size, wait) cell")
    sizes: list[int] | None = Field(None, description="map sizes of the suite to use (default: all)")
    max_tokens: int = Field(192, ge=16)


class RunConfig(TrainConfig):
    """The main job: rounds of GRPO -> validation -> engineer, then the benchmark."""

    model: str = Field("tiny", description="local Hugging Face folder, or a preset (tiny, 50m) built in the run")
    env: EnvConfig | None = Field(None, description="round-0 config; none = a random legal config from `seed`")
    train_agents: int = Field(
        2, ge=1, le=8, description="agents per training instance of the random round-0 config (when `env` is none)"
    )
    random_pin: RandomPin = Field(
        default_factory=RandomPin,
        description="knobs of the random round-0 config held at one value on every size (when `env` is none; "
        "an ablation of the domain randomisation: the other knobs are drawn as without it)",
    )
    rounds: int = Field(3, ge=1)
    warm_start: bool = Field(True, description="SFT on solver demonstrations before round 0")
    score_start: bool = Field(
        True, description="score the starting policy before RL (validation and benchmark) for the report"
    )
    revert_below_start: bool = Field(
        False,
        description="undo a round whose validation valid rate ends below the starting policy's: the learners go "
        "back to the last state that did not (actors.job.guard_round); needs the start scored",
    )
    engineer: EngineerConfig = Field(default_factory=EngineerConfig)
    validation: EvalConfig = Field(default_factory=lambda: EvalConfig(agents=[2], per_cell=4))
    benchmark: EvalConfig = Field(default_factory=lambda: EvalConfig(agents=[3, 4, 5], per_cell=10))


def load_run_config(
    path: str | Path, overrides: dict[str, Any] | None = None, assignments: Sequence[str] = ()
) -> RunConfig:
    return _load(RunConfig, path, overrides, "run config", assignments)
