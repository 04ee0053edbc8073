"""The ``agentkit`` command line (typer + rich).

Each command group lives in its own module under :mod:`agentkit.commands`; this module only assembles them,
so heavy imports (torch, docker) happen when a command runs, not at start-up.
"""

from __future__ import annotations

import inspect

import typer

from agentkit import __version__
from agentkit.commands import check, generate, mcp, run, sandbox, serve, specialize, train
from agentkit.commands.eval import eval_app

app = typer.Typer(
    name="agentkit",
    help="Function-calling agents on an embedded block-diffusion (DiffusionGemma) runtime.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["--help", "-h"]},  # every command, as most CLIs do
)


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


app.command("run", cls=run.RunCommand)(run.run_command)
app.command("chat")(run.chat_command)
app.command("check")(check.check_command)
app.command("generate", cls=generate.GenerateCommand)(generate.generate_command)
app.command("serve")(serve.serve_command)
app.add_typer(sandbox.sandbox_app, name="sandbox")
app.command(
    "train",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Train the embedded checkpoint (options of `python -m model.training`; --help-train lists them).",
)(train.train_command)
app.add_typer(eval_app, name="eval")
app.command("specialize")(specialize.specialize_command)
app.add_typer(mcp.mcp_app, name="mcp")

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
