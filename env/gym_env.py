"""Gymnasium single-turn text environment: observation = prompt, action = response text.

Registered as ``envengineer/MAPFFrozenLake-v0`` when ``env`` is imported. By default it draws
instances from the shipped validation split; pass ``instances=`` (a JSON Lines path, or a list of
instances or of dicts as read from JSON Lines) to use others, and ``options={"instance_id": ...}`` to
``reset`` to pick one. Prompts and verdicts come from the task API (``env.task``), as in training.
"""

from __future__ import annotations

import string
from pathlib import Path

import gymnasium
from gymnasium import spaces

from env import task
from env.benchmark import VALIDATION
from env.evaluate import RewardConfig
from env.instance import Instance, as_instance, read_instances
from env.prompt import parse_response
from env.render import ansi

ENV_ID = "envengineer/MAPFFrozenLake-v0"
CHARSET = string.printable
MAX_PROMPT_CHARS = 8192
MAX_RESPONSE_CHARS = 4096


class MAPFFrozenLakeTextEnv(gymnasium.Env):
    """One instance per episode; one response ends it with the evaluator's reward."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        instances: list[Instance | dict] | str | Path | None = None,
        reward: RewardConfig | None = None,
        render_mode: str | None = None,
    ):
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        if instances is None:
            instances = VALIDATION.path
        if isinstance(instances, (str, Path)):
            self.instances = read_instances(instances)
        else:
            self.instances = [as_instance(i) for i in instances]
        if not self.instances:
            raise ValueError("no instances given")
        self.by_id = {inst.id: inst for inst in self.instances}
        self.reward_config = reward or RewardConfig()
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_PROMPT_CHARS, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_RESPONSE_CHARS, min_length=0, charset=CHARSET)
        self.instance: Instance | None = None
        self.prompt = ""
        self.last_plan: list[list[str]] | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "instance_id" in options:
            self.instance = self.by_id[options["instance_id"]]
        else:
            self.instance = self.instances[int(self.np_random.integers(len(self.instances)))]
        self.last_plan = None
        self.prompt = task.prompt(self.instance)
        return self.prompt, {"instance_id": self.instance.id}

    def step(self, action: str):
        if self.instance is None:
            raise RuntimeError("call reset() before step()")
        verdict = task.judge(self.instance, action, self.reward_config)
        parsed = parse_response(action, self.instance.num_agents)  # kept for render()
        self.last_plan = parsed if isinstance(parsed, list) else None
        return self.prompt, verdict.reward, True, False, verdict.to_dict()

    def render(self):
        if self.render_mode == "ansi" and self.instance is not None:
            return ansi(self.instance, self.last_plan)
        return None
