"""The ``agentkit`` command line (typer + rich)."""

from __future__ import annotations

import typer

from agentkit import __version__

app = typer.Typer(
    name="agentkit",
    help="Function-calling agents on an embedded block-diffusion (DiffusionGemma) runtime.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the agentkit version."""
    typer.echo(__version__)


def main() -> None:
    """Entry point of the ``agentkit`` console script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
