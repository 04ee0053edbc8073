"""What a binder reads and what it returns: :class:`BindingInputs`, :class:`Decision`, and the :class:`Binder`
protocol."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch


@dataclasses.dataclass(frozen=True)
class BindingInputs:
    """One turn as a binder sees it, after the prefill and before the constraint is built.

    Attributes:
        model, tokenizer: the checkpoint and its tokenizer.
        input_ids: the ``P`` prompt ids.
        tools: the OpenAI-style declarations rendered in the prompt, in order.
        specs: the same tools, normalised (``schema.ToolSpec``).
        tool_choice: the turn's ``tool_choice``.
        hidden: ``[1, P, H]`` the encoder's final states over the prompt (``None``: not run).
        memory_keys: ``[1, >= P, D]`` the copy head's pointer keys (``None``: no copy head).
        prefill: the prompt's ``model.turn.prefill.Prefill`` (its KV cache may be read, never extended; ``None``:
            not run).
        request_turn: the turn answers the user's last message (no tool response since).
        syntax: the checkpoint's call syntax, ``"gemma"`` or ``"json"``."""

    model: Any
    tokenizer: Any
    input_ids: list[int]
    tools: list[dict[str, Any]]
    specs: list[Any]
    tool_choice: Any = "auto"
    hidden: torch.Tensor | None = None
    memory_keys: torch.Tensor | None = None
    prefill: Any = None
    request_turn: bool = False
    syntax: str = "gemma"


@dataclasses.dataclass(frozen=True)
class Decision:
    """A binder's proposal: ``candidates`` ``{(tool, parameter): (value, ...)}``, best first; one value forces it.
    ``decline``: no offered tool fits, so the turn answers without a call (``tool_choice`` ``"auto"`` only)."""

    candidates: Mapping[tuple[str, str], tuple[Any, ...]]
    decline: bool = False

    def apply(self, specs: list[Any]) -> list[Any]:
        """``specs`` with each proposed parameter narrowed to its candidates (``enum``; ``pattern``, ``format``,
        ``x-grounded``, ``anyOf``/``oneOf`` dropped). Tools, parameters and ``required`` stay as they were; tools
        without a proposal are returned as the same objects."""
        out = []
        for spec in specs:
            props = (spec.parameters or {}).get("properties") or {}
            mine = {n: v for (t, n), v in self.candidates.items() if t == spec.name and n in props}
            if not mine:
                out.append(spec)
                continue
            narrowed = {n: _narrowed(s, mine[n]) if n in mine else s for n, s in props.items()}
            out.append(dataclasses.replace(spec, parameters={**spec.parameters, "properties": narrowed}))
        return out


def _narrowed(schema: dict[str, Any], values: tuple[Any, ...]) -> dict[str, Any]:
    """``schema`` as an ``enum`` of ``values``."""
    dropped = ("pattern", "format", "x-grounded", "anyOf", "oneOf")
    return {k: v for k, v in schema.items() if k not in dropped} | {"enum": list(values)}


@runtime_checkable
class Binder(Protocol):
    """Proposes values for a turn's parameters before its constraint is built (``ChatModel.prepare`` calls
    :meth:`propose` after the prefill)."""

    name: str

    def propose(self, inputs: BindingInputs) -> Decision | None:
        """The proposal for one turn, or ``None`` to leave the constraint as the tools declare it."""
        ...
