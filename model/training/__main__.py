"""``python -m model.training``: train the embedded checkpoint (see :mod:`model.training.train`)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import logging
import sys
import typing
from typing import Any

from model.training.settings import TrainConfig


def option_help() -> dict[str, str]:
    """``{field: help text}`` from the ``Attributes:`` section of :class:`TrainConfig`'s docstring (griffe)."""
    from griffe import Docstring

    log = logging.getLogger("griffe")
    level = log.level
    log.setLevel(logging.ERROR)  # griffe warns about attributes it cannot type; the dataclass types them
    try:
        sections = Docstring(inspect.cleandoc(TrainConfig.__doc__ or "")).parse("google")
    finally:
        log.setLevel(level)
    return {
        a.name: " ".join(line.strip() for line in a.description.splitlines() if line.strip())
        for s in sections
        if s.kind.value == "attributes"
        for a in s.value
    }


def _option_type(hint: Any) -> Any:
    """The argparse ``type`` of a field annotated ``hint`` (``int``, ``float``, ``str``, or ``X | None``)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if args else hint
    if base not in (int, float, str):
        raise TypeError(f"TrainConfig field type {hint!r} has no command-line form")
    return base


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """A :class:`TrainConfig` from ``--field-name VALUE`` options (typed by the fields, help from the docstring;
    ``SystemExit`` on bad ones, out-of-range values included)."""
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
            ap.add_argument(flag, type=_option_type(hints[f.name]), default=f.default, help=text)
    ns = ap.parse_args(argv)
    try:
        return TrainConfig(**vars(ns))
    except ValueError as e:  # an option out of its range (TrainConfig.__post_init__)
        ap.error(str(e))


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
