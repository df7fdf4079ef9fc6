"""The typed records between the stages of a GRPO step: rollout worker -> buffer -> learner / step record.

A ``TrajectoryBatch`` is one worker's scored samples of one step (G samples for each of P instances, so
S = P x G rows); ``TrajectoryBatch.merge`` joins the workers' batches for the learners. A ``SFTBatch`` is
the warm start's demonstrations. A ``RolloutSummary`` is what the driver's step record needs of a batch.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from env.stats import Key


@dataclass
class TrajectoryBatch:
    """Scored samples: per-instance fields are indexed by ``group``, per-sample fields by row."""

    # per instance [P]
    instance_ids: list[str] = field(default_factory=list)
    features: list[Key] = field(default_factory=list)  # the failure-table cell (size, agents, holes, wait)
    levels: list[dict] = field(default_factory=list)  # the instance itself, as data (a replayable level)
    replayed: list[bool] = field(default_factory=list)  # drawn from the round's replay set (plr-levels)
    # per sample [S]: what was sampled
    group: list[int] = field(default_factory=list)  # index of the sample's instance: its GRPO group
    prompt_ids: list[list[int]] = field(default_factory=list)  # [S][prompt tokens]
    response_ids: list[list[int]] = field(default_factory=list)  # [S][response tokens]
    logprobs: list[list[float]] = field(default_factory=list)  # [S][response tokens]: behaviour logprobs
    finish_reason: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # [S] the response as the engine decoded it
    weight_version: list[int] = field(default_factory=list)  # the policy version that sampled it
    # per sample [S]: the verifier's verdict
    reward: list[float] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    optimal: list[bool] = field(default_factory=list)
    failure: list[str | None] = field(default_factory=list)  # category, None when valid
    fault_char: list[int | None] = field(default_factory=list)  # where the failure starts (env.locate), or None
    regret: list[float] = field(default_factory=list)  # distance from the optimum in [0, 1] (env.evaluate.regret)

    def __len__(self) -> int:
        return len(self.reward)

    @classmethod
    def merge(cls, batches: list[TrajectoryBatch]) -> TrajectoryBatch:
        """The workers' batches as one; group ids stay unique (offset by the instances before them)."""
        merged = cls()
        for batch in batches:
            offset = len(merged.instance_ids)
            for name in cls.__dataclass_fields__:
                values = getattr(batch, name)
                getattr(merged, name).extend([g + offset for g in values] if name == "group" else values)
        return merged

    def sample_instance_ids(self) -> list[str]:
        """The instance id of every sample [S]."""
        return [self.instance_ids[g] for g in self.group]

    def sample_records(self, groups: int) -> list[dict]:
        """The first ``groups`` groups as JSON rows (the instance's id and the instance as data, then each
        sample's text, reward and verdict), for reading what the policy wrote (``grpo.log_samples``,
        ``envengineer samples``)."""
        rows = []
        for group in range(min(groups, len(self.instance_ids))):
            members = [i for i, g in enumerate(self.group) if g == group]
            samples = [
                {"text": self.text[i], "reward": self.reward[i], "failure": self.failure[i],
                 "tokens": len(self.response_ids[i]), "finish_reason": self.finish_reason[i]}
                for i in members
            ]  # fmt: skip
            level = self.levels[group] if group < len(self.levels) else None
            rows.append({"instance": self.instance_ids[group], "level": level, "samples": samples})
        return rows

    def digest(self) -> dict[str, str]:
        """Short hashes of the instances (ids and prompts) and of the sampled responses."""
        instances = json.dumps([self.sample_instance_ids(), self.prompt_ids]).encode()
        responses = json.dumps(self.response_ids).encode()
        return {
            "instances": hashlib.sha256(instances).hexdigest()[:16],
            "responses": hashlib.sha256(responses).hexdigest()[:16],
        }

    def signal_groups(self) -> int:
        """Groups whose samples earned different rewards (the ones GRPO learns from)."""
        rewards: dict[int, set[float]] = {}
        for group, reward in zip(self.group, self.reward):
            rewards.setdefault(group, set()).add(reward)
        return sum(len(earned) > 1 for earned in rewards.values())

    def level_scores(self) -> dict[str, tuple[dict, float]]:
        """Instance id -> (the instance as data, its samples' mean regret): the levels level replay keeps."""
        regrets: dict[int, list[float]] = {}
        for group, value in zip(self.group, self.regret):
            regrets.setdefault(group, []).append(value)
        return {self.instance_ids[g]: (self.levels[g], sum(values) / len(values)) for g, values in regrets.items()}

    def summarize(self, worker: int, skipped: int, times: dict[str, float]) -> RolloutSummary:
        return RolloutSummary(
            worker=worker,
            instances=len(self.instance_ids),
            replayed=sum(self.replayed),
            skipped=skipped,
            samples=len(self),
            prompt_tokens=sum(map(len, self.prompt_ids)),
            response_tokens=sum(map(len, self.response_ids)),
            reward_sum=sum(self.reward),
            valid=sum(self.valid),
            optimal=sum(self.optimal),
            signal_groups=self.signal_groups(),
            failures=dict(Counter(f for f in self.failure if f)),
            weight_versions=sorted(set(self.weight_version)),
            digest=self.digest(),
            times=times,
        )


@dataclass
class RolloutSummary:
    """Counts and clocks of one worker's batch: what the step record needs without the batch itself."""

    worker: int
    instances: int
    replayed: int  # of them, taken from the round's replay set (plr-levels)
    skipped: int  # specs the generator could not turn into a solvable instance
    samples: int
    prompt_tokens: int  # summed over samples (each sample is a prompt + response sequence for the learner)
    response_tokens: int
    reward_sum: float
    valid: int
    optimal: int
    signal_groups: int  # groups whose samples earned different rewards (the ones GRPO learns from)
    failures: dict[str, int]  # category -> samples
    weight_versions: list[int]
    digest: dict[str, str]
    times: dict[str, float]  # sample, generate, score (seconds)


@dataclass
class SFTBatch:
    """Demonstrations: prompt and target answer tokens, one row each [N]."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]

    def rows(self, indices: list[int]) -> SFTBatch:
        return SFTBatch([self.prompt_ids[i] for i in indices], [self.response_ids[i] for i in indices])
