"""What every command shares: the stderr console and the one way to stop with a clear error."""

from __future__ import annotations

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr; the exit to raise (code 2: bad input, 1: the work failed)."""
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code=code)
