"""Where a failing response first goes wrong, as a character offset into its text (for located credit).

The evaluator names the failing agent ``i`` and time step ``t`` of an executed plan (off_grid, hole, vertex
and edge conflicts: agent ``i``'s ``t``-th move, ``i`` the lower-numbered agent of a conflict;
goal_not_reached: agent ``i``'s plan as a whole). The fault is located at the earliest of:

- in the answer block, the ``t``-th move of the ``Agent i:`` line (goal_not_reached: the line's start);
- in the think block, if it writes agent ``i``'s path as cells (``Agent i: (r, c) (r, c) ...``, start
  first), the cell after the ``t``-th move, i.e. the path's cell ``t`` (goal_not_reached: the line's
  start; a path shorter than that: the end of its line).

Everything before that offset is the correct prefix; the fault and all that follows (the rest of that
line and every later line) is what the failure is charged to. A verdict without a location (valid,
parse_error, wrong_agents) gives ``None``: the whole response carries the credit.
"""

from __future__ import annotations

import re

from env.evaluate import Verdict
from env.prompt import ANSWER_BLOCK, THINK_BLOCK

_AGENT_LINE = re.compile(r"^[ \t]*agent\s*(\d+)\s*:(.*)$", re.IGNORECASE | re.MULTILINE)
_CELL = re.compile(r"\(\s*\d+\s*,\s*\d+\s*\)")
_MOVE = re.compile(r"[^,\s][^,]*?(?=\s*(?:,|$))")

LOCATED = ("off_grid", "hole", "vertex_conflict", "edge_conflict", "goal_not_reached")


def _agent_line(block: str, agent: int) -> re.Match | None:
    for match in _AGENT_LINE.finditer(block):
        if int(match.group(1)) == agent:
            return match
    return None


def _answer_offset(text: str, think_spans: list[tuple[int, int]], agent: int, t: int, whole_line: bool) -> int | None:
    for answer in ANSWER_BLOCK.finditer(text):
        if any(a <= answer.start() < b for a, b in think_spans):
            continue  # an answer written inside the think block is not the answer
        line = _agent_line(answer.group(1), agent)
        if line is None:
            return None
        base = answer.start(1)
        if whole_line:
            return base + line.start()
        moves = list(_MOVE.finditer(line.group(2)))
        if t < 1 or t > len(moves):
            return base + line.end()
        return base + line.start(2) + moves[t - 1].start()
    return None


def _think_offset(text: str, think_spans: list[tuple[int, int]], agent: int, t: int, whole_line: bool) -> int | None:
    for start, end in think_spans:
        line = _agent_line(text[start:end], agent)
        if line is None:
            continue
        cells = list(_CELL.finditer(line.group(2)))
        if not cells:
            return None  # not a path of cells: nothing to locate in this block
        if whole_line:
            return start + line.start()
        if t >= len(cells):
            return start + line.end()
        return start + line.start(2) + cells[t].start()
    return None


def fault_offset(text: str, verdict: Verdict) -> int | None:
    """The character offset in ``text`` where the verdict's failure starts, or None (see the module doc)."""
    if verdict.valid or verdict.failure not in LOCATED or verdict.failure_agent is None:
        return None
    agent, t = verdict.failure_agent, verdict.failure_step or 0
    whole_line = verdict.failure == "goal_not_reached"
    think_spans = [(m.start(), m.end()) for m in THINK_BLOCK.finditer(text)]
    found = [
        offset
        for offset in (
            _answer_offset(text, think_spans, agent, t, whole_line),
            _think_offset(text, think_spans, agent, t, whole_line),
        )
        if offset is not None
    ]
    return min(found, default=None)
