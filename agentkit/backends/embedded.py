"""The default backend: the project's embedded block-diffusion runtime (:class:`model.turn.chat.ChatModel`).

The checkpoint is loaded on the first model turn (not at construction), so building an agent stays cheap
and ``import agentkit`` never imports torch. Tool calls come out of schema-constrained denoising, so they
always parse and match their tool's JSON Schema.

Tool responses whose text is a JSON object are handed to the chat template as objects, so they render in
the native Gemma form ``<|tool_response>response:NAME{key:value}<tool_response|>``.
Tool responses with images (content parts, when the checkpoint reads images: :attr:`EmbeddedBackend.takes_images`)
render as ``response:NAME{result:<|"|>TEXT<|image>...<image|><|"|>}``: each image's soft tokens inside the
response, through the same vision path as a user's images (``model.heads.vision``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import numbers
import threading
from pathlib import Path
from typing import Any

from agentkit.backends.base import Backend, ModelTurn, PromptTooLong, ToolDeclaration, TurnRequest, Usage
from agentkit.errors import BackendError, ToolDefinitionError
from agentkit.messages import ToolCall, to_template_messages
from model.heads.vision import DEFAULT_VISION_BUDGET, ImageError, vision_processor
from model.turn.limits import PromptTooLong as ModelPromptTooLong
from schema import SchemaError, fingerprint, normalize_tool

#: One checkpoint load at a time in a process: transformers builds the model under process-wide state (the
#: ``meta`` device while weights load), so two loads in two threads broke each other and every later load.
_LOAD_LOCK = threading.Lock()


def normalized_tool(name: str, parameters: dict[str, Any]) -> Any:
    """Normalise a tool for the schema-constrained decoder and check that it can enforce the tool's ``parameters``.

    Normalises once (``schema.normalize_tool``: titles, local ``$ref``) and
    compiles the tool-call grammar of this one tool from the result (``grammar.turn.
    tool_call_grammar``, no tokenizer, about a millisecond), so an unsupported keyword or an unsatisfiable
    schema fails when an agent on the embedded backend is assembled (or its bundle loaded), not mid-generation.
    Defining a tool does not run it: a tool for a remote server may use any JSON Schema.

    Args:
        name: the tool's name.
        parameters: its JSON Schema (``type: object``).

    Returns:
        The ``schema.ToolSpec`` (what the grammar of every later turn is built from), or the
        ``schema.SchemaError`` (``keyword``, JSON pointer ``path`` relative to ``parameters``,
        message) when the constraint cannot enforce the schema.
    """
    from grammar.turn import tool_call_grammar

    try:
        spec = normalize_tool({"name": name, "parameters": parameters})
        tool_call_grammar([spec], tool_choice="required")
    except SchemaError as exc:
        return exc
    return spec


def constraint_support_error(name: str, parameters: dict[str, Any]) -> Any:
    """``None`` when the schema-constrained decoder can enforce a tool's ``parameters``, else the
    ``schema.SchemaError`` (see :func:`normalized_tool`)."""
    got = normalized_tool(name, parameters)
    return got if isinstance(got, SchemaError) else None


def _check_settings(*, seed: Any, max_new_tokens: Any, threads: Any) -> None:
    """Refuse a setting the runtime would refuse only once the checkpoint has loaded (a seed as text, a seed
    past 64 bits, ``threads=0``).

    Raises:
        ValueError: naming the setting and the value.
    """
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


class EmbeddedBackend(Backend):
    """Runs the model in-process with ``model.turn.chat.ChatModel``.

    Args:
        model: checkpoint folder or hub id; ``None`` = the embedded default ``model/checkpoints/agentkit-tiny``.
        dtype: ``"float32"`` or ``"bfloat16"``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
        max_new_tokens: token budget per model turn (default: the checkpoint's generation config).
        seed: denoising seed used for every turn (``None``: nondeterministic).
        threads: torch intra-op threads to set on load (``None``: :func:`model.threads.default_threads`, 1 on
            a machine with at most 2 cores; it replaces a count set with ``torch.set_num_threads``).
        chat_model: an already loaded ``ChatModel`` (then ``model``/``dtype``/``device`` are unused).
        on_event: runtime callback (per denoising step / canvas), see ``model.runtime``.
        adapter: a LoRA adapter folder written by ``agentkit specialize``, applied to the checkpoint on load
            (``None``: none); one trained on another base is refused, naming both.
        binding: the binder that proposes parameter values before each tool-call turn (``model.binding``):
            ``"auto"`` (the checkpoint's default: ``"bind_values"`` in its ``agentkit_decoding.json``),
            ``"copy-head"``, ``"none"``, or a ``model.binding.Binder``.

    Raises:
        BackendError: (from :meth:`complete`) the checkpoint cannot be loaded, or a tool's schema is not
            supported by the constraint.
        agentkit.backends.base.PromptTooLong: (from :meth:`complete`) the prompt does not fit the checkpoint's
            positions with the token budget; raised before generation allocates anything, so the planner can
            trim the prompt.
        model.heads.vision.ImageError: (from :meth:`complete`) an image the checkpoint cannot read (its tower
            has too few positions for it at that budget, no vision tower...), naming the image.
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
        self._next_id = 0
        #: soft tokens of an image part without ``vision_budget`` (the planner sizes images by it when trimming)
        self.default_vision_budget = DEFAULT_VISION_BUDGET
        # (tool name, fingerprint of its parameters) -> its ToolSpec: normalised once in check_tool
        self._specs: dict[tuple[str, str], Any] = {}
        self._takes_images: bool | None = None

    def check_tool(self, name: str, parameters: dict[str, Any]) -> None:
        """Refuse a tool whose ``parameters`` the tool-call constraint cannot enforce (see
        :func:`normalized_tool`); :class:`agentkit.Agent` calls it for each tool it registers. The normalised
        ``ToolSpec`` is kept under the tool's name and the fingerprint of its ``parameters``
        (``schema.fingerprint``): the constraint of every turn that declares this tool with equal
        ``parameters`` (any copy) is built from it, without normalising the schema again.

        Raises:
            ToolDefinitionError: ``tool 'NAME': the tool-call constraint cannot enforce its parameters:
                ... (keyword 'K' at /json/pointer)``.
        """
        got = normalized_tool(name, parameters)
        if isinstance(got, SchemaError):
            why = str(got).removeprefix(f"tool {name!r}: ")  # the grammar's message may name it too
            raise ToolDefinitionError(
                f"tool {name!r}: the tool-call constraint cannot enforce its parameters: {why}"
            )
        self._specs[(name, fingerprint(parameters))] = got

    def tool_specs(self, tools: list[ToolDeclaration]) -> list[Any]:
        """Per declaration, the ``ToolSpec`` :meth:`check_tool` kept for it (same name, equal ``parameters``
        by fingerprint), else the declaration itself (the grammar normalises it)."""
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
        """The loaded ``model.turn.chat.ChatModel`` (loads the checkpoint on first access; threads that ask at
        once wait for one load, and one load runs at a time in the process).

        Raises:
            BackendError: the checkpoint cannot be loaded (the message names the path and the problem).
        """
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
        """The binder of :attr:`binding` (``"auto"`` resolved against the loaded checkpoint's default), or
        ``None``."""
        return self.chat_model.default_binder if self.binding == "auto" else self.binding

    @property
    def max_prompt_tokens(self) -> int | None:
        """The longest prompt (tokens) a model turn takes: the checkpoint's ``max_position_embeddings`` minus
        the token budget rounded up to whole canvases (loads the checkpoint on first access).

        Raises:
            BackendError: the checkpoint cannot be loaded.
        """
        limit = self.chat_model.max_prompt_tokens(self.max_new_tokens)
        return None if limit is None else int(limit)

    @property
    def takes_images(self) -> bool:
        """True when the checkpoint reads images (a vision tower, image token ids and an image processor
        config): tool responses with images then come as content parts, and each image is expanded to its soft
        tokens inside the tool response (``model.heads.vision``), as a user's images are. Loads the checkpoint.

        Raises:
            BackendError: the checkpoint cannot be loaded.
        """
        if self._takes_images is None:
            try:
                vision_processor(self.chat_model.checkpoint)
                self._takes_images = True
            except ImageError:
                self._takes_images = False
        return self._takes_images

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this checkpoint's prompts (as ordinary text; loads the checkpoint).

        Raises:
            BackendError: the checkpoint cannot be loaded.
        """
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
        except ModelPromptTooLong as exc:  # this backend's error: the planner trims the prompt, or gives up
            raise PromptTooLong(
                exc.prompt_tokens, exc.limit, exc.max_positions, exc.generation_tokens
            ) from exc
        except ImageError:  # the caller's image, named: not the backend's fault
            raise
        except ValueError as exc:  # model.constraints SchemaError / ToolCallParseError, grammar errors
            raise BackendError(f"embedded backend: {type(exc).__name__}: {exc}") from exc
        calls = []
        for c in out.tool_calls:
            calls.append(ToolCall(id=f"call_{self._next_id}", name=c.name, arguments=dict(c.arguments)))
            self._next_id += 1
        usage = Usage(
            input_tokens=int(getattr(out, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(out, "completion_tokens", 0) or 0),
            requests=1,
        )
        return ModelTurn(
            text=out.text or "", thinking=out.thinking or "", tool_calls=calls, usage=usage, raw=out
        )

    async def aturn(self, request: TurnRequest) -> ModelTurn:
        """Async :meth:`turn` (``Agent.arun``): the turn denoises on a daemon thread of its own, so the event loop
        keeps serving its other tasks meanwhile (other runs, async tools and their timeouts, a web server's
        requests); turns of concurrent runs denoise at once, each its own generation. A cancelled run stops
        waiting at once; its turn finishes on its thread, which does not hold up the loop's shutdown or the
        process's exit (Ctrl-C in ``asyncio.run``)."""
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
