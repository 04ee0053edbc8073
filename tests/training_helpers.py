"""Helpers of the training tests: the tiny training model and the check every generated example must pass."""

from __future__ import annotations

import math
from typing import Any

from model.training.data import Example
from model.training.settings import TrainConfig


def tiny_train_config(**overrides: Any) -> TrainConfig:
    """A :class:`model.training.settings.TrainConfig` of a model small enough for CPU tests; ``overrides`` set any
    field."""
    fields: dict[str, Any] = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_layers": 2,
        "num_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 32,
    }
    return TrainConfig(**{**fields, **overrides})


def sanity_check(ex: Example) -> None:
    """Raise ``ValueError`` naming the problem unless each tool is declared once and each call has a declared name,
    declared parameters and finite numbers."""
    declared = {t["function"]["name"]: t["function"]["parameters"] for t in ex.tools}
    if len(declared) != len(ex.tools):
        names = [t["function"]["name"] for t in ex.tools]
        raise ValueError(
            f"{ex.kind}: tools declared twice: {sorted({n for n in names if names.count(n) > 1})}"
        )
    for name, args in ex.calls:
        if name not in declared:
            raise ValueError(f"{ex.kind}: call {name!r} is not among the declared tools {sorted(declared)}")
        unknown = set(args) - set(declared[name].get("properties", {}))
        if unknown:
            raise ValueError(f"{ex.kind}: call {name!r} has undeclared arguments {sorted(unknown)}")
        for k, v in args.items():
            if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
                raise ValueError(f"{ex.kind}: {name}.{k} is not finite")
