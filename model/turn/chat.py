"""Chat with tools on a DiffusionGemma checkpoint: prompt rendering, constrained generation, parsing.

:class:`ChatModel` is what the embedded backend calls. Messages and tools are OpenAI-style dicts
(``docs/INTERFACES.md``), rendered with the checkpoint's chat template; with tools, generation runs under a
:class:`~model.constraints.denoise.GrammarConstraint` built from their JSON Schemas, so every call parses and
validates. Text is never a control token: prompts are encoded with :func:`model.checkpoint.tokenizer.encode_chat`
and outputs parsed from :func:`model.checkpoint.tokenizer.decode_marked`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import torch

from grammar.llg import new_matcher
from grammar.parse import ParsedCall, parse_tool_calls
from grammar.turn import answer_value_json, tool_call_grammar
from model.binding import BindingInputs
from model.binding.binder import resolve_binder
from model.checkpoint.loading import LoadedCheckpoint, load_checkpoint
from model.checkpoint.tokenizer import decode_marked, encode_chat
from model.constraints.denoise import GrammarConstraint
from model.constraints.span_copy import SpanCopier
from model.heads.vision import VisionInputs, prepare_images, vision_processor
from model.runtime import EventCallback, GenerationStats, generate
from model.runtime.settings import DenoiseSettings
from model.turn.limits import check_prompt_length, prompt_token_limit
from model.turn.prefill import Prefill, prefill_prompt
from schema import normalize_tool


class TurnOptions(TypedDict, total=False):
    """The keyword options of one model turn (:meth:`ChatModel.prepare`, :meth:`ChatModel.chat`); all optional.

    Keys:
        max_new_tokens: token budget (default: the checkpoint's); raised to fit the shortest possible call.
        constrained: apply the tool-call grammar during denoising (default ``True``).
        temperature: ``(t_max, t_min)`` override of the linear temperature schedule.
        response_format: OpenAI's ``{"type": "json_schema", "json_schema": {"schema": ..., "strict": bool}}`` or
            ``{"type": "json_object"}``: the turn's text is a JSON value under it (not with a required call).
        vision_budget: soft tokens per image for image parts without their own ``vision_budget`` (one of
            :data:`model.heads.vision.VISION_BUDGETS`; ``None``: 280). Image parts are OpenAI's ``image_url`` (a data
            URL or a local path) or ``{"type": "image", "image": PATH | bytes | PIL.Image}``.
        tool_specs: the same tools, in order, already normalised (``schema.ToolSpec``); the constraint is built from
            them and ``tools`` only render the prompt.
        binder: a :class:`model.binding.Binder` or its name, proposing values after the prefill; ``"auto"``:
            :attr:`ChatModel.default_binder`; ``None`` (default): none.
        parallel_tool_calls: ``False``: one call at most (default ``True``)."""

    max_new_tokens: int | None
    constrained: bool
    temperature: tuple[float, float] | None
    response_format: dict[str, Any] | None
    vision_budget: int | None
    tool_specs: list[Any] | None
    binder: Any
    parallel_tool_calls: bool


@dataclass
class ChatOutput:
    """Result of :meth:`ChatModel.chat`.

    Attributes:
        text: prose of the model turn (thinking and control tokens removed).
        thinking: the thought channel's text, if any.
        tool_calls: parsed tool calls (``name`` and JSON-typed ``arguments``), in order.
        raw: the decoded generation with control tokens kept.
        stats: runtime statistics.
        prompt_tokens, completion_tokens: token counts.
        latency_s: wall time of the call in seconds."""

    text: str
    thinking: str | None
    tool_calls: list[ParsedCall]
    raw: str
    stats: GenerationStats
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


class ChatModel:
    """A loaded checkpoint ready for tool-calling chat.

    Args:
        checkpoint: a :class:`~model.checkpoint.loading.LoadedCheckpoint`.
        syntax: tool-call syntax of the checkpoint's template: ``"gemma"`` (native Gemma 4 calls) or ``"json"``.
    """

    def __init__(self, checkpoint: LoadedCheckpoint, syntax: str = "gemma") -> None:
        self.checkpoint = checkpoint
        self.model = checkpoint.model
        self.tokenizer = checkpoint.tokenizer
        self.settings: DenoiseSettings = checkpoint.settings
        self.syntax = syntax

    @classmethod
    def load(
        cls,
        path_or_id: str | None = None,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        syntax: str = "gemma",
        adapter: str | None = None,
    ) -> ChatModel:
        """Load a checkpoint (``None``: the embedded default), with a LoRA ``adapter`` folder applied when given.
        Raises :class:`model.checkpoint.loading.CheckpointError` (``AdapterError`` for the adapter)."""
        return cls(load_checkpoint(path_or_id, dtype=dtype, device=device, adapter=adapter), syntax=syntax)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        """``messages`` (+ tools) rendered with the chat template, ending with the model turn opener; for display
        (the model gets :meth:`encode`'s ids)."""
        return str(
            self.tokenizer.apply_chat_template(
                messages, tools=tools or None, tokenize=False, add_generation_prompt=True
            )
        )

    def encode(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Prompt token ids of ``messages`` (+ tools), ending with the model turn opener; control ids only where the
        template places them (:func:`model.checkpoint.tokenizer.encode_chat`)."""
        return encode_chat(self.tokenizer, messages, tools or None)

    def encode_turn(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        vision_budget: int | None = None,
    ) -> tuple[list[int], VisionInputs | None]:
        """Prompt ids of a turn whose messages may hold images (each ``<|image|>`` expanded to its soft tokens), and
        the processed images or ``None``.

        Raises:
            model.heads.vision.ImageError: an unusable image or budget, or a checkpoint that cannot read images."""
        messages, vision = prepare_images(self.checkpoint, messages, vision_budget)
        input_ids = self.encode(messages, tools)
        if vision is not None:
            input_ids = vision_processor(self.checkpoint).expand(input_ids, vision.soft_tokens)
        return input_ids, vision

    def make_constraint(
        self,
        tools: list[Any],
        tool_choice: Any = "auto",
        grounding: list[str] | None = None,
        no_repeat: bool | None = None,
        parallel_tool_calls: bool = True,
        answer_grounding: list[str] | None = None,
        span_texts: list[str] | None = None,
        answer_json: str | None = None,
    ) -> Any:
        """A fresh :class:`GrammarConstraint` for ``tools`` and ``tool_choice``.

        Args:
            tools: OpenAI-style tool declarations, or their ``schema.ToolSpec``.
            tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.
            grounding: texts that ``x-grounded`` parameters take a span of (:func:`grounding_texts`); ``None``: free.
            no_repeat: the no-repeat rule (default: ``settings.no_repeat``).
            parallel_tool_calls: ``False``: one call at most in the turn.
            answer_grounding: texts the prose takes its numbers and dates from (:func:`answer_texts`); ``None``: free.
            span_texts: texts whose spans the prose copies whole once started
                (:class:`model.constraints.span_copy.SpanCopier`); ``None``: no span copies.
            answer_json: the answer is this JSON value, not prose (``grammar.turn.answer_value_json``).

        Raises:
            schema.SchemaError: unsupported keyword or unsatisfiable schema (names its path).
            ValueError: a named tool's required grounded parameter has nothing to ground on."""
        grammar = tool_call_grammar(
            tools,
            tool_choice=tool_choice,
            syntax=self.syntax,
            grounding=grounding,
            parallel_tool_calls=parallel_tool_calls,
            answer_grounding=answer_grounding,
            answer_json=answer_json,
        )
        matcher = new_matcher(self.tokenizer, grammar)
        return GrammarConstraint(
            matcher,
            self.tokenizer,
            pad_token_id=self.settings.pad_token_id,
            no_repeat=self.settings.no_repeat if no_repeat is None else no_repeat,
            extend_prose=self.settings.extend_prose or answer_json is not None,  # a JSON answer: as calls
            repeat_window=self.settings.repeat_window,
            span_copy=SpanCopier.from_texts(span_texts, self.tokenizer) if span_texts else None,
            answer_vote=answer_json is not None and bool(tools) and tool_choice in ("auto", None),
        )

    @property
    def default_binder(self) -> str | None:
        """What ``binder="auto"`` means: ``"copy-head"`` when the checkpoint sets ``bind_values``, else ``None``."""
        return "copy-head" if self.settings.bind_values else None

    def max_prompt_tokens(self, max_new_tokens: int | None = None) -> int | None:
        """The longest prompt :meth:`chat` accepts with this token budget (default: the checkpoint's); ``None`` when
        unbounded."""
        return prompt_token_limit(self.model, self.settings.replace(max_new_tokens=max_new_tokens))

    def prepare(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = "auto",
        **options: Unpack[TurnOptions],
    ) -> PreparedTurn:
        """Everything one model turn needs before denoising: prompt ids, images, settings and a fresh constraint
        (:meth:`chat` runs it; the batching server runs many in one batch). Arguments as :meth:`chat`.

        Raises:
            As :meth:`chat`; ``ValueError`` also for ``tool_specs`` of another length than ``tools`` or an unknown
            ``response_format`` type. A ``tool_choice`` that requires a call makes the turn a call, as on OpenAI:
            ``response_format`` shapes text answers only, so that turn does not use it."""
        if unknown := sorted(set(options) - set(TurnOptions.__annotations__)):
            raise TypeError(
                f"unknown turn option(s) {unknown}; the options are {list(TurnOptions.__annotations__)}"
            )
        response_format, tool_specs = options.get("response_format"), options.get("tool_specs")
        binder = options.get("binder")
        input_ids, vision = self.encode_turn(messages, tools, options.get("vision_budget"))
        t_max, t_min = options.get("temperature") or (None, None)  # replace() ignores None
        settings = self.settings.replace(
            max_new_tokens=options.get("max_new_tokens"), t_max=t_max, t_min=t_min
        )
        constraint, prefill = None, None
        if not tools and tool_choice not in ("auto", "none", None):
            raise ValueError(f"tool_choice={tool_choice!r} needs at least one tool, but no tools were given")
        check_prompt_length(len(input_ids), self.model, settings)  # before any grammar work
        if tool_choice not in ("auto", "none", None):
            response_format = None  # the turn is a call; response_format shapes text answers (as on OpenAI)
        answer_json = _answer_json(response_format)  # a JSON answer, or calls under "auto"; None: prose
        # without tools: the prose-only grammar (text, never a call or a control token)
        if options.get("constrained", True) or answer_json is not None:
            tools = tools or []
            grounding = grounding_texts(messages) if any(_grounded(t) for t in tools) else None
            if tool_specs is not None and len(tool_specs) != len(tools):
                raise ValueError(
                    f"tool_specs has {len(tool_specs)} entries for {len(tools)} tools (one per tool)"
                )
            specs = tools if tool_specs is None else tool_specs
            if (
                tools
                and tool_choice != "none"
                and vision is None
                and (found := resolve_binder(self.default_binder if binder == "auto" else binder))
            ):
                prefill = prefill_prompt(self.model, torch.tensor([input_ids], device=self.model.device))
                request_turn = bool(messages) and messages[-1].get("role") == "user"
                specs, declined = self._bind(
                    found, prefill, input_ids, tools, specs, tool_choice, request_turn
                )
                tool_choice = "none" if declined else tool_choice
            choice = tool_choice if tools else "auto"
            prose = answer_json is None  # the prose rules (grounded facts, span copies, no repeats)
            facts = answer_texts(messages) if settings.ground_answers and prose else None
            spans = tool_texts(messages) if settings.span_copy and prose else None
            constraint = self.make_constraint(
                specs,
                choice,
                grounding,
                None if prose else False,
                options.get("parallel_tool_calls", True),
                facts,
                spans,
                answer_json,
            )
        if constraint is not None:
            settings = self._fit_budget(constraint, settings, len(input_ids), response_format, tool_choice)
        return PreparedTurn(input_ids, settings, constraint, vision, prefill)

    def _fit_budget(
        self,
        constraint: Any,
        settings: DenoiseSettings,
        prompt_len: int,
        response_format: dict[str, Any] | None,
        tool_choice: Any,
    ) -> DenoiseSettings:
        """``settings`` with a budget the constraint's shortest completion fits in (ValueError, PromptTooLong)."""
        limit = 4096
        shortest = constraint.min_completion_tokens(limit)
        if shortest >= limit and response_format is not None and response_format.get("type") != "text":
            raise ValueError(
                f"the response_format schema has no value shorter than {limit} tokens (a required property "
                "whose schema recurses into itself, or a length or item bound in the thousands)"
            )
        if shortest >= limit:
            raise ValueError(
                f"the tool-call grammar found no completion shorter than {limit} tokens for "
                f"tool_choice={tool_choice!r}: a schema no short value satisfies (a required property "
                "whose schema recurses into itself, a length or item bound in the thousands, or a string "
                "pattern it cannot complete: simplify it, anchor patterns with ^...$, or let the model "
                "answer in prose with tool_choice='auto')"
            )
        need = shortest + constraint.margin + 1
        if settings.max_new_tokens < need:
            settings = settings.replace(max_new_tokens=need)
            check_prompt_length(prompt_len, self.model, settings)
        return settings

    def _bind(
        self,
        binder: Any,
        prefill: Prefill,
        input_ids: list[int],
        tools: list[dict[str, Any]],
        specs: list[Any],
        tool_choice: Any,
        request_turn: bool,
    ) -> tuple[list[Any], bool]:
        """``specs`` normalised and narrowed by ``binder``'s decision on ``prefill``'s states, and whether it
        declined the call."""
        normalized = [normalize_tool(t) for t in specs]
        keys = None if prefill.memory is None else prefill.memory.keys
        inputs = BindingInputs(
            self.model,
            self.tokenizer,
            input_ids,
            tools,
            normalized,
            tool_choice,
            prefill.hidden,
            keys,
            prefill,
            request_turn,
            self.syntax,
        )
        decision = binder.propose(inputs)
        if decision is None:
            return normalized, False
        return decision.apply(normalized), decision.decline and tool_choice in ("auto", None)

    def finish(
        self, new_tokens: list[int], prompt_tokens: int, stats: GenerationStats, started: float
    ) -> ChatOutput:
        """Decode and parse one generated turn (``new_tokens``: ids after the prompt, no padding; ``started``: the
        turn's :func:`time.perf_counter`). A call repeating an earlier one of the turn exactly is dropped (``raw``
        keeps it).

        Raises:
            grammar.parse.ToolCallParseError: malformed call text (only possible unconstrained)."""
        raw = self.tokenizer.decode(new_tokens, skip_special_tokens=False)
        parsed = parse_tool_calls(decode_marked(self.tokenizer, new_tokens), syntax=self.syntax)
        calls: dict[str, ParsedCall] = {}
        for c in parsed.calls:
            calls.setdefault(json.dumps([c.name, c.arguments], sort_keys=True), c)
        return ChatOutput(
            text=parsed.text,
            thinking=parsed.thinking,
            tool_calls=list(calls.values()),
            raw=raw,
            stats=stats,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(new_tokens),
            latency_s=time.perf_counter() - started,
        )

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = "auto",
        *,
        seed: int | None = None,
        on_event: EventCallback | None = None,
        **options: Unpack[TurnOptions],
    ) -> ChatOutput:
        """Generate one model turn.

        Args:
            messages: OpenAI-style messages.
            tools: OpenAI-style tool declarations (``None``/empty: plain chat).
            tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.
            seed: random seed of the denoising (``None``: nondeterministic).
            on_event: per-step / per-canvas callback (:mod:`model.runtime`).
            options: :class:`TurnOptions`.

        Raises:
            model.heads.vision.ImageError: an image missing, corrupt or of another format, a budget not one of the
                five, or a checkpoint that cannot read images.
            schema.SchemaError: a tool's schema is unsupported.
            grammar.parse.ToolCallParseError: only when ``constrained=False`` and the output is malformed.
            ValueError: ``tool_choice`` ``"required"`` or a named tool without ``tools``.
            TypeError: an option :class:`TurnOptions` lacks.
            model.turn.limits.PromptTooLong: the prompt does not fit ``max_position_embeddings`` minus the budget."""
        t0 = time.perf_counter()
        turn = self.prepare(messages, tools, tool_choice, **options)
        input_ids = torch.tensor([turn.input_ids], dtype=torch.long, device=self.model.device)
        result = generate(
            self.model,
            input_ids,
            turn.settings,
            constraints=[turn.constraint] if turn.constraint is not None else None,
            seed=seed,
            on_event=on_event,
            prefill=turn.prefill,
            **({} if turn.vision is None else turn.vision.generate_kwargs()),
        )
        new = result.new_tokens[0]
        new = new[new != turn.settings.pad_token_id]
        return self.finish(new.tolist(), len(turn.input_ids), result.stats, t0)


@dataclass
class PreparedTurn:
    """One model turn ready to denoise (:meth:`ChatModel.prepare`).

    Attributes:
        input_ids: prompt token ids.
        settings: denoising settings (budget raised to fit the shortest call).
        constraint: a fresh :class:`~model.constraints.denoise.GrammarConstraint`, or ``None``.
        vision: the prompt's :class:`model.heads.vision.VisionInputs`, or ``None``.
        prefill: the prompt's :class:`model.turn.prefill.Prefill` when a binder read it (single use), else ``None``.
    """

    input_ids: list[int]
    settings: DenoiseSettings
    constraint: Any = None
    vision: VisionInputs | None = None
    prefill: Prefill | None = None


def _answer_json(response_format: dict[str, Any] | None) -> str | None:
    """The ``%json`` schema of the answer OpenAI's ``response_format`` asks for (``None``: prose); ValueError for
    an unknown type or a ``json_schema`` without its schema, SchemaError for a schema the grammar refuses."""
    rf = response_format or {}
    kind = rf.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return answer_value_json(None)
    if kind == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise ValueError("response_format json_schema needs a 'json_schema' object with a 'schema'")
        return answer_value_json(spec["schema"], strict=bool(spec.get("strict", False)))
    raise ValueError(f"response_format type must be 'text', 'json_object' or 'json_schema', got {kind!r}")


def _grounded(tool: dict[str, Any]) -> bool:
    return '"x-grounded": true' in json.dumps(tool)


def grounding_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The texts grounded parameters may copy from: the user's messages and the tool responses. A response given as
    an object counts as its string and number values, as the model reads them in the prompt."""
    out: list[str] = []

    def leaves(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, int | float):
            out.append(str(v))
        elif isinstance(v, dict | list | tuple):
            for x in v.values() if isinstance(v, dict) else v:
                leaves(x)

    for m in messages:
        if m.get("role") not in ("user", "tool"):
            continue
        c = m.get("content")
        if isinstance(c, list):  # content parts (a user's, or a tool response's with images)
            out.extend(str(p.get("text", "")) for p in c if isinstance(p, dict) and p.get("type") == "text")
        else:
            leaves(c)
    return out


def tool_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The tool responses' texts (as :func:`grounding_texts` reads them), for span copies."""
    return grounding_texts([m for m in messages if m.get("role") == "tool"])


def answer_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The texts a grounded answer copies its facts from: :func:`grounding_texts` plus the arguments of the
    assistant's tool calls so far (``{"days": 5}`` counts as ``"5"``), in order."""
    out = grounding_texts(messages)
    for m in messages:
        if m.get("role") not in ("assistant", "model"):
            continue
        for c in m.get("tool_calls") or ():
            f = c.get("function", c) if isinstance(c, dict) else {}
            args = f.get("arguments") if isinstance(f, dict) else None
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    out.append(args)
                    continue
            out.extend(grounding_texts([{"role": "tool", "content": args}]))
    return out
