"""``python -m model.training``: train the embedded checkpoint (see :mod:`model.training.train`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from model.training.train import TrainConfig, train


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """Build a :class:`TrainConfig` from ``--field-name VALUE`` options (one per config field).

    Raises:
        SystemExit: on unknown options or bad values (argparse).
    """
    ap = argparse.ArgumentParser(
        prog="python -m model.training", description="Train the agentkit-tiny checkpoint."
    )
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if isinstance(default, bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
            continue
        typ: Any = {int: int, float: float, str: str}.get(type(default), str)
        if f.name in ("max_minutes",):
            typ = float
        if f.name in ("stop_at",):
            typ = int
        if f.name in ("bot_share",):
            typ = float
        ap.add_argument(flag, type=typ, default=default)
    ns = ap.parse_args(argv)
    return TrainConfig(**vars(ns))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    cfg = parse_args(argv)
    try:
        train(cfg)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
