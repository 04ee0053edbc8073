"""``agentkit train``: train the embedded checkpoint (same options as ``python -m model.training``)."""

from __future__ import annotations

import typer


def train_command(ctx: typer.Context) -> None:
    """Train the agentkit-tiny checkpoint on synthetic function-calling data.

    Options are those of ``python -m model.training`` (``--out-dir``, ``--steps``, ``--max-minutes``,
    ``--device cuda``, ``--batch-size``, ``--final-dir``, ... ; ``agentkit train --help-train`` lists them).
    """
    from model.training.__main__ import main, parse_args

    args = list(ctx.args)
    if "--help-train" in args:
        parse_args(["--help"])
        return
    raise typer.Exit(main(args))
