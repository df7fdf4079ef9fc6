"""Markdown tables for the reports of every layer (``env`` is the lowest layer, so they live here)."""

from __future__ import annotations


def md_row(cells: list[str]) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def md_head(head: list[str]) -> list[str]:
    """A markdown table's header row and rule."""
    return [md_row(head), "|" + "---|" * len(head)]


def size_table(sizes: list[int], rows: list[tuple[str, list[str], str]]) -> list[str]:
    """The paper's table: one row per ``(agents, cells per size, Sum)``, a column per map size."""
    lines = md_head(["agents", *(f"{s}x{s}" for s in sizes), "Sum"])
    return lines + [md_row([agents, *cells, total]) for agents, cells, total in rows]
