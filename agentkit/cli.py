"""The ``agentkit`` command line (typer + rich).

Each command group lives in its own module under :mod:`agentkit.commands` and exposes ``register(app)``;
this module only assembles them, so heavy imports (torch, docker) happen when a command runs, not at start-up.
"""

from __future__ import annotations

import importlib
import inspect

import typer

from agentkit import __version__

app = typer.Typer(
    name="agentkit",
    help="Function-calling agents on an embedded block-diffusion (DiffusionGemma) runtime.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["--help", "-h"]},  # every command, as most CLIs do
)

#: Modules under agentkit.commands that provide ``register(app: typer.Typer) -> None``.
COMMAND_MODULES = ("run", "check", "generate", "serve", "sandbox", "train", "eval", "specialize", "mcp")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Function-calling agents on an embedded block-diffusion (DiffusionGemma) runtime."""


@app.command()
def version() -> None:
    """Print the agentkit version."""
    typer.echo(__version__)


for _name in COMMAND_MODULES:
    importlib.import_module(f"agentkit.commands.{_name}").register(app)

# The command list shows each command's summary: the first paragraph of its docstring as one line (typer would
# keep the docstring's line breaks and wrap them again).
for _cmd in app.registered_commands:
    _doc = _cmd.help or (_cmd.callback.__doc__ if _cmd.callback is not None else None)
    if _cmd.short_help is None and _doc:
        _cmd.short_help = " ".join(inspect.cleandoc(_doc).split("\n\n")[0].split())


def main() -> None:
    """Entry point of the ``agentkit`` console script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
