"""Prompt codec: an instance becomes prompt text; a response becomes a plan (or a parse failure).

The answer format is one line per agent inside ``<answer>...</answer>``::

    <answer>
    Agent 0: RIGHT, DOWN, WAIT
    Agent 1: UP, LEFT
    </answer>

Parsing tolerates a ``<think>...</think>`` block, reasoning before the answer, letter case and spacing;
it is strict about content: exactly one answer block, only ``Agent i: MOVE, MOVE, ...`` lines, known
moves, each agent once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from env.grid import MOVE_NAMES, moves_to_path
from env.instance import Instance

MAX_MOVES_PER_AGENT = 1000

RULES = (
    "Rules: at every time step each agent makes one move: UP (row - 1), DOWN (row + 1), LEFT (column - 1), "
    "RIGHT (column + 1) or WAIT. Agents must stay on the map and never enter a hole. Two agents may not be "
    "on the same cell at the same time, nor swap cells in one step. After its last move an agent stays "
    "where it is, and every agent must end on its goal. Use as few time steps as possible."
)
FORMAT = (
    "Answer format: you may think first, then give one line per agent inside <answer></answer>, "
    "moves separated by commas, for example:\n"
    "<answer>\nAgent 0: RIGHT, DOWN, WAIT\nAgent 1: UP, LEFT\n</answer>"
)


def draw_map(instance: Instance) -> str:
    """The grid with row and column numbers: ``H`` for a hole, ``.`` for ice."""
    holes = set(map(tuple, instance.holes))
    width = len(str(instance.size - 1))
    header = " " * (width + 1) + " ".join(str(c) for c in range(instance.size))
    rows = [
        f"{r:>{width}} " + " ".join("H" if (r, c) in holes else "." for c in range(instance.size))
        for r in range(instance.size)
    ]
    return "\n".join([header, *rows])


def render_prompt(instance: Instance) -> str:
    """The text the policy answers."""
    agents = "\n".join(
        f"Agent {i}: start ({s[0]}, {s[1]}), goal ({g[0]}, {g[1]})"
        for i, (s, g) in enumerate(zip(instance.starts, instance.goals))
    )
    return (
        f"Plan paths for {instance.num_agents} agents on a {instance.size}x{instance.size} frozen lake.\n\n"
        f"Map (row 0 is the top row, column 0 the left column; H = hole, . = ice):\n{draw_map(instance)}\n\n"
        f"Agents (row, column):\n{agents}\n\n{RULES}\n\n{FORMAT}"
    )


def format_answer(plan: list[list[str]], thinking: str | None = None) -> str:
    """A response in the exact answer format (used for solver demonstrations)."""
    lines = [f"Agent {i}: {', '.join(moves)}".rstrip() for i, moves in enumerate(plan)]
    think = f"<think>\n{thinking}\n</think>\n" if thinking else ""
    return think + "<answer>\n" + "\n".join(lines) + "\n</answer>"


def path_thinking(instance: Instance, plan: list[list[str]]) -> str:
    """A think block for a demonstration: every agent's path as the cells it visits, start to goal."""
    return "\n".join(
        f"Agent {i}: " + " ".join(f"({r}, {c})" for r, c in moves_to_path(tuple(start), moves))
        for i, (start, moves) in enumerate(zip(instance.starts, plan))
    )


def plan_thinking(instance: Instance, plan: list[list[str]]) -> str:
    """A richer think block: the holes read off the map as cells, then every agent's path as cells (one
    per time step, so a WAIT repeats a cell). Listing the holes first turns "is this cell a hole?" into
    matching a cell already written, instead of counting columns in the drawn map."""
    holes = " ".join(f"({r}, {c})" for r, c in instance.holes) or "none"
    return f"Holes: {holes}\n" + path_thinking(instance, plan)


THINKING_STYLES = {"paths": path_thinking, "plan": plan_thinking}


@dataclass
class ParseFailure:
    """Why a response is not a plan: ``parse_error`` or ``wrong_agents``, with a readable detail."""

    category: str
    detail: str


THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_LINE = re.compile(r"agent\s*(\d+)\s*:(.*)", re.IGNORECASE)


def without_thinking(text: str) -> str:
    """The response without its ``<think>...</think>`` blocks: the part that is scored."""
    return THINK_BLOCK.sub("", text)


def parse_response(text: str, num_agents: int) -> list[list[str]] | ParseFailure:
    """The plan in ``text`` (one move list per agent), or why there is none."""
    if not isinstance(text, str):
        return ParseFailure("parse_error", f"response is a {type(text).__name__}, not text")
    visible = without_thinking(text)
    if re.search(r"<think>", visible, re.IGNORECASE):
        return ParseFailure("parse_error", "unterminated <think> block")
    blocks = ANSWER_BLOCK.findall(visible)
    if not blocks:
        return ParseFailure("parse_error", "no <answer>...</answer> block")
    if len(blocks) > 1:
        return ParseFailure("parse_error", f"{len(blocks)} <answer> blocks; expected exactly one")
    plans: dict[int, list[str]] = {}
    for raw_line in blocks[0].splitlines():
        line = raw_line.strip()
        if not line:
            continue
        match = _LINE.fullmatch(line)
        if not match:
            return ParseFailure("parse_error", f"not an 'Agent i: MOVE, ...' line: {line[:80]!r}")
        agent, body = int(match.group(1)), match.group(2).strip()
        if agent in plans:
            return ParseFailure("parse_error", f"agent {agent} appears twice")
        moves = [token.strip().upper() for token in body.split(",")] if body else []
        for move in moves:
            if move not in MOVE_NAMES:
                return ParseFailure("parse_error", f"agent {agent}: unknown move {move!r}")
        if len(moves) > MAX_MOVES_PER_AGENT:
            return ParseFailure("parse_error", f"agent {agent}: more than {MAX_MOVES_PER_AGENT} moves")
        plans[agent] = moves
    expected = set(range(num_agents))
    if set(plans) != expected:
        missing = sorted(expected - set(plans))
        extra = sorted(set(plans) - expected)
        return ParseFailure("wrong_agents", f"missing agents {missing}, unexpected agents {extra}")
    return [plans[i] for i in range(num_agents)]
