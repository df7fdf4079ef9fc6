"""Rendering: ANSI text of an instance (and where a plan leaves its agents), a PNG of the plan's paths,
and a GIF of the plan executed step by step."""

from __future__ import annotations

from pathlib import Path

from env.grid import Cell, moves_to_path
from env.instance import Instance

COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324"]


def positions_at(instance: Instance, plan: list[list[str]] | None, t: int) -> list[Cell]:
    """Where every agent is at time ``t`` (agents past their plan stay put; no rule checks)."""
    if plan is None:
        return [tuple(s) for s in instance.starts]
    cells = []
    for start, moves in zip(instance.starts, plan):
        path = moves_to_path(tuple(start), moves[:t])
        cells.append(path[-1])
    return cells


def ansi(instance: Instance, plan: list[list[str]] | None = None, t: int | None = None) -> str:
    """Text map: ``H`` hole, ``.`` ice, lowercase letter = agent's goal, digit = agent (at time ``t``,
    default the end of the plan)."""
    horizon = max((len(m) for m in plan), default=0) if plan else 0
    t = horizon if t is None else t
    holes = set(map(tuple, instance.holes))
    grid = [["H" if (r, c) in holes else "." for c in range(instance.size)] for r in range(instance.size)]
    for i, (r, c) in enumerate(instance.goals):
        grid[r][c] = chr(ord("a") + i)
    for i, (r, c) in enumerate(positions_at(instance, plan, t)):
        if 0 <= r < instance.size and 0 <= c < instance.size:
            grid[r][c] = str(i)
    legend = "digits: agents" + (f" at t={t}" if plan else " (starts)") + ", letters: their goals, H: hole"
    return "\n".join(" ".join(row) for row in grid) + "\n" + legend


def _draw_board(ax, instance: Instance) -> None:
    import matplotlib.patches as patches

    size = instance.size
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(size - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xticks(range(size))
    ax.set_yticks(range(size))
    ax.tick_params(length=0, labelsize=8)
    ax.set_facecolor("#dff3ff")
    for k in range(size + 1):
        ax.axhline(k - 0.5, color="white", lw=1)
        ax.axvline(k - 0.5, color="white", lw=1)
    for r, c in instance.holes:
        ax.add_patch(patches.Rectangle((c - 0.5, r - 0.5), 1, 1, color="#1f3b57"))
    for i, (r, c) in enumerate(instance.goals):
        colour = COLOURS[i % len(COLOURS)]
        ax.add_patch(patches.Rectangle((c - 0.35, r - 0.35), 0.7, 0.7, fill=False, ec=colour, lw=2))


def png(instance: Instance, plan: list[list[str]] | None, path: str | Path) -> Path:
    """A picture of the map with each agent's start, goal and (if given) its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1 + 0.6 * instance.size, 1 + 0.6 * instance.size), dpi=100)
    _draw_board(ax, instance)
    for i, start in enumerate(instance.starts):
        colour = COLOURS[i % len(COLOURS)]
        offset = (i - (instance.num_agents - 1) / 2) * 0.08
        if plan is not None:
            cells = moves_to_path(tuple(start), plan[i])
            ax.plot([c + offset for _, c in cells], [r + offset for r, _ in cells], color=colour, lw=2, alpha=0.8)
        ax.plot(start[1], start[0], "o", color=colour, ms=14)
        ax.text(start[1], start[0], str(i), ha="center", va="center", color="white", fontsize=9, weight="bold")
    ax.set_title(f"{instance.id}  (optimal makespan {instance.optimal_makespan})", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def gif(instance: Instance, plan: list[list[str]], path: str | Path, frame_ms: int = 500) -> Path:
    """An animation of the plan, one frame per time step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    horizon = max((len(m) for m in plan), default=0)
    frames = []
    fig, ax = plt.subplots(figsize=(1 + 0.6 * instance.size, 1 + 0.6 * instance.size), dpi=80)
    for t in range(horizon + 1):
        ax.clear()
        _draw_board(ax, instance)
        for i, (r, c) in enumerate(positions_at(instance, plan, t)):
            ax.plot(c, r, "o", color=COLOURS[i % len(COLOURS)], ms=14)
            ax.text(c, r, str(i), ha="center", va="center", color="white", fontsize=9, weight="bold")
        ax.set_title(f"{instance.id}  t={t}", fontsize=8)
        fig.canvas.draw()
        frames.append(Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).convert("P", palette=Image.ADAPTIVE))
    plt.close(fig)
    path = Path(path)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=frame_ms, loop=0)
    return path
