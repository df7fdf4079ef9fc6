"""The environment engineer: from the policy's failure evidence to the next round's configuration.

``decide`` is the core: build the context (``actors/engineer_context.py``), ask a backend, read the answer
as data (JSON or YAML, never evaluated), project it onto the legal configuration space, and record
everything (prompt, raw answer, parsed, projected, diff, notes). An answer that cannot be used after
``retries`` attempts keeps the previous configuration and records why: engineer output never crashes a
run. The engineer edits the map-size knobs only; agent count, budget and seed stay as the run set them.

Backends: ``policy`` (the current checkpoint through its Serve deployment), ``base`` (the frozen initial
checkpoint), ``openai`` (any OpenAI-compatible endpoint), and the non-LLM baselines of
``actors/engineer_baselines.py`` (``fixed``, ``random``, ``heuristic``, ``plr``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import ray
import yaml
from pydantic import BaseModel, ConfigDict, Field

from actors.chat import openai_chat, serve_chat
from actors.engineer_baselines import BASELINES
from actors.engineer_context import PRESETS, ContextConfig, EngineerInputs, render, sections, summary_request
from env.config import EnvConfig, diff, project, proposal_schema

MAX_ANSWER_CHARS = 20_000
FIXED_FIELDS = ("num_agents", "num_instances", "seed")
AGENT_COUNT_NOTE = (
    'You may also set "num_agents" (agents per training instance) beside "sizes"; the current value is kept if '
    "you leave it out."
)


class EngineerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["policy", "base", "openai", "fixed", "random", "heuristic", "plr"] = "policy"
    preset: Literal["V1", "V2", "V3", "V4", "V5", "V6"] | None = Field("V6", description="context preset")
    context: ContextConfig | None = Field(None, description="modules switched on one by one (overrides preset)")
    retries: int = Field(3, ge=1, le=10, description="attempts before keeping the previous config")
    max_tokens: int = Field(512, ge=16)
    temperature: float = Field(0.7, ge=0.0)
    structured: bool = Field(True, description="decode under the config's JSON schema where the backend can")
    agent_count: bool = Field(
        False, description="the engineer may also set num_agents (projected onto its legal range); off: it stays"
    )
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key_env: str = "OPENAI_API_KEY"

    def context_config(self) -> ContextConfig:
        return self.context or PRESETS[self.preset or "V1"]


@dataclass
class Decision:
    round: int
    backend: str
    config: EnvConfig
    prompt: str = ""
    summary: str | None = None
    answers: list[str] = field(default_factory=list)
    parsed: Any = None
    notes: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    fallback: str | None = None  # why the previous config was kept

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"config": self.config.to_dict()}

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prompt.md").write_text(self.prompt)
        (folder / "response.txt").write_text("\n\n---\n\n".join(self.answers))
        (folder / "decision.json").write_text(json.dumps(self.to_dict(), indent=1, default=str))


def parse_proposal(text: str) -> Any:
    """The data in an answer: a fenced block, a braced object or the whole text, as JSON or YAML (the first
    mapping with ``sizes`` wins); None if there is none.
    Think blocks are skipped; only ``json.loads`` and ``yaml.safe_load`` ever see the text."""
    text = re.sub(r"<think>.*?</think>", "", text[:MAX_ANSWER_CHARS], flags=re.S)
    fenced = re.findall(r"```(?:json|yaml|yml)?\s*\n(.*?)```", text, flags=re.S)
    braced = [text[text.find("{") : text.rfind("}") + 1]] if "{" in text else []
    candidates = fenced + braced + [text]
    found = []
    for candidate in candidates:
        for load in (json.loads, yaml.safe_load):
            try:
                data = load(candidate)
            except (ValueError, yaml.YAMLError):
                continue
            if isinstance(data, dict):
                found.append(data)
    return next((d for d in found if "sizes" in d), found[0] if found else None)


def decide(
    settings: EngineerConfig,
    inputs: EngineerInputs,
    ask: Callable[[str, dict | None], str] | None = None,
) -> Decision:
    """The next round's configuration. ``ask(prompt, json_schema) -> answer`` is the LLM backend (unused
    by baselines); exceptions it raises count as failed attempts."""
    decision = Decision(inputs.round, settings.backend, inputs.config)
    if settings.backend in BASELINES:
        decision.parsed = BASELINES[settings.backend](inputs)
        return _accept(decision, inputs, decision.parsed, settings.agent_count)
    context = settings.context_config()
    problems = []
    if context.self_summary:
        try:
            decision.summary = ask(summary_request(context, inputs), None)[:4000]
        except Exception as error:  # the summary is optional context
            problems.append(f"self-summary failed: {type(error).__name__}: {_last_line(error)}")
    decision.prompt = render(sections(context, inputs, decision.summary))
    if settings.agent_count:
        decision.prompt += f"\n\n{AGENT_COUNT_NOTE}"
    schema = proposal_schema(settings.agent_count) if settings.structured else None
    for attempt in range(1, settings.retries + 1):
        try:
            answer = ask(decision.prompt, schema)
        except Exception as error:
            problems.append(f"attempt {attempt}: backend error {type(error).__name__}: {_last_line(error)}")
            continue
        decision.answers.append(answer)
        parsed = parse_proposal(answer)
        if not isinstance(parsed, dict) or not isinstance(parsed.get("sizes"), dict) or not parsed["sizes"]:
            problems.append(f"attempt {attempt}: the answer holds no configuration with sizes")
            continue
        decision.parsed = parsed
        decision.notes = problems
        return _accept(decision, inputs, parsed, settings.agent_count)
    decision.notes = problems
    decision.fallback = f"no usable configuration in {settings.retries} attempts; kept the previous one"
    return decision


def _last_line(error: Exception) -> str:
    """The message of an error without a remote traceback (Ray wraps the cause's message last)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:300]


def _accept(decision: Decision, inputs: EngineerInputs, raw: dict[str, Any], agent_count: bool = False) -> Decision:
    """Project the proposal (the run's budget and seed stay, and its agent count unless the engineer has the
    ``agent_count`` knob) and record what changed."""
    names = [n for n in FIXED_FIELDS if not (n == "num_agents" and agent_count)]
    fixed = {name: getattr(inputs.config, name) for name in names}
    for name, value in fixed.items():
        if name in raw and raw[name] != value:
            decision.notes.append(f"{name}: the engineer may not change it; kept {value}")
    config, notes = project({**raw, **fixed}, base=inputs.config)
    decision.config = config
    decision.notes += notes
    decision.changes = diff(inputs.config, config)
    return decision


# ----------------------------------------------------------------------------------------------
# LLM backends: functions ask(prompt, json_schema) -> answer text


def serve_backend(deployment: str, settings: EngineerConfig) -> Callable[[str, dict | None], str]:
    """Ask a Serve deployment of this project (``policy`` or ``base``), under the JSON schema if given."""
    from ray import serve

    handle = serve.get_deployment_handle(deployment, app_name=deployment)
    chat = serve_chat(handle, settings.max_tokens, settings.temperature)
    return lambda prompt, schema: chat([prompt], schema)[0]


def openai_backend(settings: EngineerConfig) -> Callable[[str, dict | None], str]:
    """Ask any OpenAI-compatible endpoint; the key comes from the environment variable named in the settings."""
    if not settings.openai_base_url or not settings.openai_model:
        raise ValueError("the openai backend needs openai_base_url and openai_model")
    chat = openai_chat(
        settings.openai_base_url,
        settings.openai_model,
        settings.openai_api_key_env,
        settings.max_tokens,
        settings.temperature,
    )
    return lambda prompt, schema: chat([prompt], schema)[0]


@ray.remote(num_cpus=0)
class Engineer:
    """The engineer as a Ray actor: holds its settings and backend, proposes one config per round."""

    def __init__(self, settings: EngineerConfig, policy_deployment: str = "policy", base_deployment: str = "base"):
        self.settings = settings
        self.ask = None
        if self.settings.backend in ("policy", "base"):
            name = policy_deployment if self.settings.backend == "policy" else base_deployment
            self.ask = serve_backend(name, self.settings)
        elif self.settings.backend == "openai":
            self.ask = openai_backend(self.settings)

    def propose(self, inputs: EngineerInputs, folder: str) -> Decision:
        """Decide the next config and save the decision (prompt, answers, decision.json) in ``folder``."""
        decision = decide(self.settings, inputs, self.ask)
        decision.save(folder)
        return decision
