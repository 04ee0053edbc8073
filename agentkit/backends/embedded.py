"""The default backend: the project's embedded block-diffusion runtime (:class:`model.turn.chat.ChatModel`).

The checkpoint loads on the first model turn, so building an agent stays cheap. Tool calls come out of
schema-constrained denoising, so they always parse and match their tool's JSON Schema; a tool response's
images are expanded to soft tokens inside it, as a user's are.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import numbers
import threading
from pathlib import Path
from typing import Any

from agentkit.backends.base import Backend, ModelTurn, PromptTooLong, ToolDeclaration, TurnRequest, Usage
from agentkit.errors import BackendError, ToolDefinitionError
from agentkit.messages import ToolCall, to_template_messages
from model.heads.vision import DEFAULT_VISION_BUDGET, ImageError, vision_processor
from model.threads import MAX_THREADS
from schema import SchemaError, fingerprint, normalize_tool

#: The largest ``max_new_tokens`` (tokens per model turn) taken before a checkpoint loads: transformers'
#: DiffusionGemma default context, 131,072 positions, prompt included (bundle.schema.json holds the same bound); the
#: checkpoint's own ``max_position_embeddings`` is checked at each turn (``PromptTooLong`` naming ``max_new_tokens``).
MAX_NEW_TOKENS = 131_072

#: One checkpoint load at a time: transformers loads under process-wide state (the ``meta`` device).
_LOAD_LOCK = threading.Lock()


def normalized_tool(name: str, parameters: dict[str, Any]) -> Any:
    """The ``schema.ToolSpec`` of a tool (``schema.normalize_tool``) once its one-tool call grammar compiles
    (about a millisecond, no tokenizer), else the ``schema.SchemaError`` (``keyword``, JSON pointer ``path``):
    an unsupported schema fails when the agent is assembled, not mid-generation."""
    from grammar.turn import tool_call_grammar

    try:
        spec = normalize_tool({"name": name, "parameters": parameters})
        tool_call_grammar([spec], tool_choice="required")
    except SchemaError as exc:
        return exc
    return spec


def constraint_support_error(name: str, parameters: dict[str, Any]) -> Any:
    """``None`` when the constrained decoder can enforce ``parameters``, else the ``schema.SchemaError``."""
    got = normalized_tool(name, parameters)
    return got if isinstance(got, SchemaError) else None


def _check_settings(*, seed: Any, max_new_tokens: Any, threads: Any) -> None:
    """ValueError for a setting the runtime would refuse only once the checkpoint has loaded."""
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not -(2**63) <= int(seed) < 2**63
    ):
        raise ValueError(
            f"seed must be an integer that fits in a signed 64-bit integer, or None; got {seed!r}"
        )
    for name, value in (("max_new_tokens", max_new_tokens), ("threads", threads)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1
        ):
            raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
    if max_new_tokens is not None and int(max_new_tokens) > MAX_NEW_TOKENS:
        raise ValueError(
            f"max_new_tokens must be at most {MAX_NEW_TOKENS:,} (a DiffusionGemma context, prompt included), "
            f"got {max_new_tokens:,}"
        )
    if threads is not None and int(threads) > MAX_THREADS:
        raise ValueError(f"threads must be at most {MAX_THREADS}, got {threads}")


class EmbeddedBackend(Backend):
    """Runs the model in-process with ``model.turn.chat.ChatModel``.

    Args:
        model: checkpoint folder or hub id; ``None``: the embedded default ``agentkit-tiny``.
        dtype, device: ``"float32"`` or ``"bfloat16"``; ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
        max_new_tokens: token budget per model turn (default: the checkpoint's).
        seed: denoising seed of every turn (``None``: nondeterministic).
        threads: torch intra-op threads set on load (``None``: :func:`model.threads.default_threads`).
        chat_model: an already loaded ``ChatModel`` (then ``model``/``dtype``/``device`` are unused).
        on_event: runtime callback (per denoising step / canvas), see ``model.runtime``.
        adapter: a LoRA adapter folder from ``agentkit specialize``, applied on load.
        binding: the binder proposing parameter values before each tool-call turn: ``"auto"`` (the
            checkpoint's default), ``"copy-head"``, ``"none"``, or a ``model.binding.Binder``.

    Raises:
        BackendError: (from :meth:`complete`) the checkpoint cannot be loaded, or a schema is not supported.
        agentkit.backends.base.PromptTooLong: (from :meth:`complete`) the prompt does not fit with the budget.
        model.heads.vision.ImageError: (from :meth:`complete`) an image the checkpoint cannot read.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        max_new_tokens: int | None = None,
        seed: int | None = None,
        threads: int | None = None,
        chat_model: Any = None,
        on_event: Any = None,
        adapter: str | Path | None = None,
        binding: Any = "auto",
    ) -> None:
        _check_settings(seed=seed, max_new_tokens=max_new_tokens, threads=threads)
        self.model_path = None if model is None else str(model)
        self.adapter = None if adapter is None else str(adapter)
        self.dtype = dtype
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.threads = threads
        self.on_event = on_event
        self._chat_model = chat_model
        if not (
            binding in ("auto", "none", "copy-head", None) or callable(getattr(binding, "propose", None))
        ):
            raise ValueError(
                f"binding must be 'auto', 'copy-head', 'none' or a binder with propose(), got {binding!r}"
            )
        self.binding = binding
        self.name = f"embedded:{self.model_path or 'default'}" + (f"+{self.adapter}" if self.adapter else "")
        self._ids = itertools.count()
        #: soft tokens of an image part without ``vision_budget`` (the planner sizes images by it when trimming)
        self.default_vision_budget = DEFAULT_VISION_BUDGET
        # (tool name, fingerprint of its parameters) -> its ToolSpec: normalised once in check_tool
        self._specs: dict[tuple[str, str], Any] = {}
        self._takes_images: bool | None = None

    def check_tool(self, name: str, parameters: dict[str, Any]) -> None:
        """ToolDefinitionError for a tool whose ``parameters`` the constraint cannot enforce; else its
        ``ToolSpec`` is kept (by name and ``schema.fingerprint``) for every turn that declares it."""
        got = normalized_tool(name, parameters)
        if isinstance(got, SchemaError):
            why = str(got).removeprefix(f"tool {name!r}: ")  # the grammar's message may name it too
            raise ToolDefinitionError(
                f"tool {name!r}: the tool-call constraint cannot enforce its parameters: {why}"
            )
        self._specs[(name, fingerprint(parameters))] = got

    def tool_specs(self, tools: list[ToolDeclaration]) -> list[Any]:
        """Per declaration, the ``ToolSpec`` :meth:`check_tool` kept for it, else the declaration itself."""
        out: list[Any] = []
        for d in tools:
            f = d.get("function", d)
            try:
                key = (f.get("name", ""), fingerprint(f.get("parameters")))
            except TypeError:  # not JSON: the grammar reports it
                key = None
            out.append(self._specs.get(key, d) if key is not None else d)
        return out

    @property
    def chat_model(self) -> Any:
        """The loaded ``model.turn.chat.ChatModel`` (loaded on first access, once); BackendError if it cannot."""
        if self._chat_model is None:
            from model.checkpoint.loading import CheckpointError
            from model.threads import apply_threads
            from model.turn.chat import ChatModel

            with _LOAD_LOCK:
                if self._chat_model is None:
                    apply_threads(self.threads)
                    try:
                        self._chat_model = ChatModel.load(
                            self.model_path, dtype=self.dtype, device=self.device, adapter=self.adapter
                        )
                    except CheckpointError as exc:
                        raise BackendError(f"embedded backend: {exc}") from exc
        return self._chat_model

    @property
    def binder(self) -> Any:
        """The binder of :attr:`binding` (``"auto"``: the checkpoint's default), or ``None``."""
        return self.chat_model.default_binder if self.binding == "auto" else self.binding

    @property
    def max_prompt_tokens(self) -> int | None:
        """The longest prompt (tokens) a model turn takes (loads the checkpoint)."""
        limit = self.chat_model.max_prompt_tokens(self.max_new_tokens)
        return None if limit is None else int(limit)

    @property
    def takes_images(self) -> bool:
        """True when the checkpoint reads images (loads the checkpoint)."""
        if self._takes_images is None:
            try:
                vision_processor(self.chat_model.checkpoint)
                self._takes_images = True
            except ImageError:
                self._takes_images = False
        return self._takes_images

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this checkpoint's prompts (loads the checkpoint)."""
        from model.checkpoint.tokenizer import encode_text

        return len(encode_text(self.chat_model.tokenizer, text))

    def turn(self, request: TurnRequest) -> ModelTurn:
        """One constrained model turn (see :meth:`agentkit.backends.base.Backend.complete`)."""
        cm, tools = self.chat_model, request.tools
        try:
            out = cm.chat(
                to_template_messages(request.messages),
                tools=tools or None,
                tool_specs=self.tool_specs(tools) if tools else None,
                tool_choice=request.tool_choice,
                max_new_tokens=self.max_new_tokens,
                seed=self.seed,
                on_event=self.on_event,
                binder=self.binder,
            )
        except (PromptTooLong, ImageError):  # as is: the planner trims the prompt; the caller's image, named
            raise
        except ValueError as exc:  # model.constraints SchemaError / ToolCallParseError, grammar errors
            raise BackendError(f"embedded backend: {type(exc).__name__}: {exc}") from exc
        calls = [ToolCall(f"call_{next(self._ids)}", c.name, dict(c.arguments)) for c in out.tool_calls]
        prompt, completion = (
            int(getattr(out, key, 0) or 0) for key in ("prompt_tokens", "completion_tokens")
        )
        usage = Usage(prompt, completion, requests=1)
        return ModelTurn(
            text=out.text or "", thinking=out.thinking or "", tool_calls=calls, usage=usage, raw=out
        )

    async def aturn(self, request: TurnRequest) -> ModelTurn:
        """Async :meth:`turn`: it denoises on a daemon thread of its own, so the event loop keeps serving; a
        cancelled run stops waiting at once, and its thread holds up neither the loop's shutdown nor the exit."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[ModelTurn] = loop.create_future()
        context = contextvars.copy_context()

        def settle(outcome: ModelTurn | BaseException) -> None:
            if done.done():  # the run was cancelled meanwhile
                return
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

        def work() -> None:
            outcome: ModelTurn | BaseException
            try:
                outcome = context.run(self.turn, request)
            except BaseException as exc:
                outcome = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(settle, outcome)

        threading.Thread(target=work, name="agentkit-embedded-turn", daemon=True).start()
        return await done
