"""``python -m model.training``: train the embedded checkpoint (see :mod:`model.training.train`)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from typing import Any

from pydantic import ValidationError

from model.training.settings import TrainConfig


def option_help() -> dict[str, str]:
    """``{field: help text}`` from the ``Attributes:`` section of :class:`TrainConfig`'s docstring."""
    section = inspect.cleandoc(TrainConfig.__doc__ or "").split("Attributes:\n", 1)[1]
    entries = re.finditer(r"^    (\w+): (.*(?:\n {8}.*)*)", section, flags=re.MULTILINE)
    return {m[1]: " ".join(m[2].split()) for m in entries}


def _problem(err: Any) -> str:
    """One of pydantic's errors as ``--flag: problem, got VALUE``, or the message of a check between options."""
    if not err["loc"]:
        return str(err["ctx"]["error"])
    return f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg'].lower()}, got {err['input']}"


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """A :class:`TrainConfig` from ``--field-name VALUE`` options (typed by the fields' annotations, ``int``,
    ``float``, ``str``, ``bool`` or ``X | None``; help from the docstring); ``SystemExit`` on bad ones."""
    ap = argparse.ArgumentParser(
        prog="python -m model.training",
        description="Train the agentkit-tiny checkpoint (docs/TRAINING.md has the recipe).",
    )
    helps = {k: v.replace("%", "%%") for k, v in option_help().items()}  # argparse formats help with %
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        text = helps[f.name]
        if f.default not in (None, "") and "default" not in text:
            text += f" (default: {f.default})"
        if hints[f.name] is bool:
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=text)
        else:
            kind = next(a for a in (*typing.get_args(hints[f.name]), hints[f.name]) if a is not type(None))
            ap.add_argument(flag, type=kind, default=f.default, help=text)
    try:
        return TrainConfig(**vars(ap.parse_args(argv)))
    except ValidationError as e:  # an option out of its range, or one that needs another
        ap.error("; ".join(_problem(err) for err in e.errors()))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    cfg = parse_args(argv)
    try:
        if cfg.stage is not None or cfg.stages_dir:
            from model.checkpoint.loading import DEFAULT_CHECKPOINT
            from model.training.stages import run_stage

            run_stage(cfg, decoding_from=DEFAULT_CHECKPOINT)
        else:
            from model.training.train import train

            train(cfg)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
