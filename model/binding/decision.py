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
        hidden: ``[1, P, H]`` the encoder's final states over the prompt, from the prefill (``None``: not run).
        memory_keys: ``[1, >= P, D]`` the copy head's pointer keys from the prefill (``None``: no copy head).
    """

    model: Any
    tokenizer: Any
    input_ids: list[int]
    tools: list[dict[str, Any]]
    specs: list[Any]
    tool_choice: Any = "auto"
    hidden: torch.Tensor | None = None
    memory_keys: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class Decision:
    """A binder's proposal: for some parameters, the values the turn's calls may give them.

    Attributes:
        candidates: ``{(tool name, parameter): (value, ...)}``, best first; one value forces it.
    """

    candidates: Mapping[tuple[str, str], tuple[Any, ...]]

    def apply(self, specs: list[Any]) -> list[Any]:
        """``specs`` with each proposed parameter narrowed to its candidates (``enum``; ``pattern``, ``format``,
        ``x-grounded`` and ``anyOf``/``oneOf`` dropped, as the candidates already fit them). Every tool, every parameter and each
        tool's ``required`` list stay as they were: the model still chooses whether to call, which tool, and
        whether to give an optional parameter. Tools without a proposal are returned as the same objects."""
        out = []
        for spec in specs:
            props = (spec.parameters or {}).get("properties") or {}
            mine = {n: v for (t, n), v in self.candidates.items() if t == spec.name and n in props}
            if not mine:
                out.append(spec)
                continue
            narrowed = {
                n: (
                    {
                        k: v
                        for k, v in s.items()
                        if k not in ("pattern", "format", "x-grounded", "anyOf", "oneOf")
                    }
                    | {"enum": list(mine[n])}
                    if n in mine
                    else s
                )
                for n, s in props.items()
            }
            out.append(dataclasses.replace(spec, parameters={**spec.parameters, "properties": narrowed}))
        return out


@runtime_checkable
class Binder(Protocol):
    """Proposes values for a turn's parameters before its constraint is built (:meth:`model.turn.chat.ChatModel.
    prepare` calls :meth:`propose` after the prefill, with the prefill's states)."""

    name: str

    def propose(self, inputs: BindingInputs) -> Decision | None:
        """The proposal for one turn, or ``None`` to leave the constraint as the tools declare it."""
        ...
