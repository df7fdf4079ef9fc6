"""Entry point of the ``envengineer`` command."""

import typer

from cli import serving, testbed, training

app = typer.Typer(
    help="envengineer: RL on MAPF-FrozenLake with an LLM environment engineer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
testbed.register(app)
serving.register(app)
training.register(app)

if __name__ == "__main__":
    app()
