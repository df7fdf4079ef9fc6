"""The environment engineer: from the policy's failure evidence to the next round's configuration.

``decide`` is the core: build the context (``actors/engineer_context.py``), ask a backend, read the answer
as data (JSON or YAML, never evaluated), project it onto the legal configuration space, and record
everything (prompt, raw answer, parsed, projected, diff, notes). An answer that cannot be used after
``retries`` attempts keeps the previous configuration and records why: engineer output never crashes a
run. The engineer edits the map-size knobs only; budget and seed stay as the run set them, and so does the
agent count unless ``agent_count`` is on. With ``probe``, the proposal is first measured on the current
policy and revised once where it gives no learning signal (``actors/engineer_probe.py``).

Backends: ``policy`` (the current checkpoint through its Serve deployment), ``base`` (the frozen initial
checkpoint), ``openai`` (any OpenAI-compatible endpoint), and the non-LLM baselines of
``actors/engineer_baselines.py`` (``fixed``, ``random``, ``heuristic``, ``plr``, ``band``), and ``plr-levels``
(``actors/level_replay.py``: replays scored instances rather than editing the configuration).
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
from actors.engineer_baselines import BASELINES, BandConfig, evidence_note
from actors.engineer_context import PRESETS, ContextConfig, EngineerInputs, render, sections, summary_request
from actors.engineer_probe import PROBE_REVISED, Probe, ProbeConfig, Score, drop_flagged, evidence, run_probe
from actors.level_replay import LevelReplayConfig, choose_levels
from env import task
from env.config import EnvConfig, diff, project, proposal_schema
from env.generator import derive_seed
from env.instance import Instance

MAX_ANSWER_CHARS = 20_000
FIXED_FIELDS = ("num_agents", "num_instances", "seed")
AGENT_COUNT_NOTE = (
    'You may also set "num_agents" (agents per training instance) beside "sizes"; the current value is kept if '
    "you leave it out."
)


class EngineerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["policy", "base", "openai", "fixed", "random", "heuristic", "plr", "band", "plr-levels"] = "policy"
    preset: Literal["V1", "V2", "V3", "V4", "V5", "V6"] | None = Field("V6", description="context preset")
    context: ContextConfig | None = Field(None, description="modules switched on one by one (overrides preset)")
    retries: int = Field(3, ge=1, le=10, description="attempts before keeping the previous config")
    max_tokens: int = Field(512, ge=16)
    temperature: float = Field(0.7, ge=0.0)
    structured: bool = Field(True, description="decode under the config's JSON schema where the backend can")
    agent_count: bool = Field(
        False, description="the engineer may also set num_agents (projected onto its legal range); off: it stays"
    )
    probe: ProbeConfig | None = Field(
        None, description="score the proposal on the current policy first and revise once (off by default)"
    )
    levels: LevelReplayConfig = Field(default_factory=LevelReplayConfig, description="the plr-levels engineer")
    band: BandConfig = Field(default_factory=BandConfig, description="the band engineer's target and steps")
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
    probes: list[Probe] = field(default_factory=list)  # with engineer.probe: the proposal's, then the revision's
    levels: list[Instance] = field(default_factory=list)  # plr-levels: the next round's replay set
    proposed: EnvConfig | None = None  # with engineer.probe: the configuration before the revision

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self) | {"config": self.config.to_dict(), "probes": [p.to_dict() for p in self.probes]}
        data["levels"] = [level.id for level in self.levels]  # the levels themselves: round_<k>/levels.jsonl
        return data | {"proposed": self.proposed.to_dict() if self.proposed else None}

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prompt.md").write_text(self.prompt)
        (folder / "response.txt").write_text("\n\n---\n\n".join(self.answers))
        (folder / "decision.json").write_text(json.dumps(self.to_dict(), indent=1, default=str))
        if self.probes:
            rows = [json.dumps(i) for p in self.probes for i in p.instances]
            (folder / "probe_instances.jsonl").write_text("".join(r + "\n" for r in rows))


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


def has_sizes(parsed: Any) -> bool:
    """Whether a parsed answer is a configuration with at least one size (what the engineer can use)."""
    return isinstance(parsed, dict) and isinstance(parsed.get("sizes"), dict) and bool(parsed["sizes"])


def decide(
    settings: EngineerConfig,
    inputs: EngineerInputs,
    ask: Callable[[str, dict | None], str] | None = None,
    score: Score | None = None,
) -> Decision:
    """The next round's configuration. ``ask(prompt, json_schema) -> answer`` is the LLM backend (unused
    by baselines); exceptions it raises count as failed attempts. With ``settings.probe``, ``score`` (the
    current policy's greedy verdicts) probes the proposal and it is revised once (actors/engineer_probe.py)."""
    decision = _propose(settings, inputs, ask)
    if settings.probe is None or score is None or decision.fallback:
        return decision
    return _probe_and_revise(settings, inputs, ask, score, decision)


def _probe_and_revise(settings: EngineerConfig, inputs: EngineerInputs, ask, score: Score, decision: Decision):
    probe = run_probe(decision.config, settings.probe, inputs.round + 1, score)
    decision.probes.append(probe)
    if not probe.flagged:
        decision.notes.append("probe: every size with data is in the learning band")
        return decision
    decision.proposed = decision.config
    raw = None
    if ask is not None:
        prompt = f"{decision.prompt}\n\n## Your proposal\n{decision.answers[-1]}\n\n## Probe\n{evidence(probe)}"
        try:
            answer = ask(prompt, proposal_schema(settings.agent_count) if settings.structured else None)
            decision.answers.append(answer)
            raw = parse_proposal(answer)
        except Exception as error:
            decision.notes.append(f"probe: revision failed: {type(error).__name__}: {_last_line(error)}")
        if not has_sizes(raw):
            decision.notes.append("probe: the revision holds no configuration with sizes")
            raw = None
        else:
            decision.notes.append(PROBE_REVISED)
    if raw is None:
        raw, note = drop_flagged(decision.config, probe)
        decision.notes.append(f"probe: {note}")
        if raw is None:
            return decision
    revised = _accept(Decision(decision.round, decision.backend, inputs.config), inputs, raw, settings.agent_count)
    decision.config, decision.changes = revised.config, revised.changes
    decision.notes += revised.notes
    decision.probes.append(run_probe(decision.config, settings.probe, inputs.round + 1, score))
    return decision


def _propose(settings: EngineerConfig, inputs: EngineerInputs, ask) -> Decision:
    """The engineer's own proposal (baseline or LLM with retries), projected."""
    decision = Decision(inputs.round, settings.backend, inputs.config)
    if settings.backend == "plr-levels":  # the configuration stays; the levels to replay are the proposal
        seed = derive_seed(inputs.config.seed, "plr-levels", inputs.round + 1)
        decision.levels = choose_levels(inputs.levels, inputs.step, settings.levels, seed)
        decision.notes.append(f"plr-levels: {len(decision.levels)} levels to replay from {len(inputs.levels)} scored")
        return _accept(decision, inputs, inputs.config.to_dict(), settings.agent_count)
    if settings.backend in BASELINES:
        decision.parsed = BASELINES[settings.backend](inputs, settings)
        if note := evidence_note(inputs, settings):
            decision.notes.append(note)
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
        if not has_sizes(parsed):
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
        self.score = None
        if settings.probe is not None:  # the probe asks the current policy, whichever backend proposes
            from ray import serve

            policy = serve.get_deployment_handle(policy_deployment, app_name=policy_deployment)
            greedy = serve_chat(policy, settings.probe.max_tokens, temperature=0.0)
            self.score = lambda instances: task.judge_all(zip(instances, greedy([task.prompt(i) for i in instances])))[
                0
            ]
        if self.settings.backend in ("policy", "base"):
            name = policy_deployment if self.settings.backend == "policy" else base_deployment
            self.ask = serve_backend(name, self.settings)
        elif self.settings.backend == "openai":
            self.ask = openai_backend(self.settings)

    def propose(self, inputs: EngineerInputs, folder: str) -> Decision:
        """Decide the next config and save the decision (prompt, answers, decision.json) in ``folder``."""
        decision = decide(self.settings, inputs, self.ask, self.score)
        decision.save(folder)
        return decision
