"""``agentkit run BUNDLE "question"`` (one shot) and ``agentkit chat BUNDLE`` (multi-turn REPL)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from agentkit.commands import (
    THREADS_HELP,
    Adapter,
    DashTextCommand,
    VisionBudget,
    check_backend,
    check_binding,
    check_images_or_exit,
    error,
    fail,
    load_bundle_or_exit,
    prints_to_stderr,
)
from agentkit.errors import AgentKitError, AgentRunError, BackendError, PromptTooLong
from agentkit.history import Conversation
from agentkit.render import RichRenderer, no_tool_response, terminal_safe
from agentkit.result import json_text
from model.heads.vision import ImageError, open_image
from model.threads import MAX_THREADS

if TYPE_CHECKING:
    from agentkit.agent import Agent, ChatSession
    from agentkit.result import RunResult

#: Exit status when the run stopped without an answer or the backend failed.
EXIT_RUN_FAILED = 1
#: Exit status for an invalid bundle or option, and for a question that does not fit the model's context.
EXIT_BAD_INPUT = 2
#: Exit status of ``run`` when it answered but every tool call failed: the answer rests on no tool response.
EXIT_NO_TOOL_RESPONSE = 3
#: Said (on stderr) of a final answer that is empty or only whitespace; ``run`` then exits ``EXIT_RUN_FAILED``.
EMPTY_ANSWER = "the final answer is empty: the model answered with no text"
#: Steps of a failed run's transcript printed on the terminal.
FAILED_STEPS_SHOWN = 3
#: REPL commands of ``agentkit chat``.
CHAT_COMMANDS = ("/exit", "/quit", "/reset", "/history", "/save PATH", "/image PATH")

# Options shared by `run` and `chat` (typer reads them as defaults).
_BUNDLE = typer.Argument(..., help="Bundle file (YAML, see docs/BUNDLES.md).")
_BACKEND = typer.Option(None, "--backend", "-b", help="embedded | openai | scripted (default: the bundle's).")
_MODEL = typer.Option(
    None,
    "--model",
    "-m",
    help="Checkpoint path/id, served model name, or script file (default: the bundle's).",
)
_MAX_STEPS = typer.Option(None, "--max-steps", min=1, help="Override the bundle's step limit.")
_THREADS = typer.Option(
    None, "--threads", min=1, max=MAX_THREADS, help=THREADS_HELP + " Overrides the bundle's model.threads."
)
_IMAGE_HELP = "An image the question is about (PNG, JPEG or WebP); repeat for several."
_SEED_HELP = (
    "Seed of the model's sampling (embedded: denoising seed; openai: the request's seed); default: the "
    "bundle's model.seed. Same seed, same question, same answer."
)
_BINDING = typer.Option(
    None,
    "--binding",
    help="Binder before each tool-call turn (embedded backend): auto (the checkpoint's default), copy-head (the "
    "copy head proposes parameter values from the request and declines one no tool fits) or none (the model alone); default: the bundle's "
    "model.binding, else auto.",
)


def _seed_in_range(seed: int | None) -> int | None:
    """``--seed`` fits a signed 64-bit integer (checked here, so ``--help`` shows no 19-digit range)."""
    if seed is not None and not -(2**63) <= seed < 2**63:
        raise typer.BadParameter(f"must fit in a signed 64-bit integer, got {seed}")
    return seed


_SEED = typer.Option(None, "--seed", callback=_seed_in_range, help=_SEED_HELP)


class RunCommand(DashTextCommand):
    """``run``'s command: a question that starts with ``-`` (``-5 degrees in Oslo?``) is told to go after ``--``."""

    usage, text = "agentkit run BUNDLE", "question"


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = terminal_safe(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(content: Any) -> str:
    """A message's content for the terminal: its text, with ``[image]`` for each image part."""
    if isinstance(content, str):
        return terminal_safe(content)
    return terminal_safe(
        " ".join(
            "[image]" if p.get("type") in ("image_url", "image") else str(p.get("text", ""))
            for p in content
            if isinstance(p, dict)
        )
    )


def _print_failure(exc: AgentRunError, *, json_hint: bool) -> None:
    """A stopped run on stderr: the reason, then (but for PromptTooLong) the transcript's last steps and where
    the whole of it is."""
    error(f"{type(exc).__name__}: {exc.reason}")
    steps = exc.result.steps
    if not steps or isinstance(exc, PromptTooLong):
        return
    shown = steps[-FAILED_STEPS_SHOWN:]
    typer.echo(f"last {len(shown)} of {len(steps)} step(s):", err=True)
    for st in shown:
        if st.text.strip():
            typer.echo(f"  step {st.index}: said {_short(st.text)}", err=True)
        for rec in st.tool_calls:
            outcome = _short(rec.content) if rec.ok else f"{rec.error_kind}: {_short(rec.error)}"
            typer.echo(f"  step {st.index}: {rec.name}({_short(rec.arguments, 80)}) -> {outcome}", err=True)
    if json_hint:
        typer.echo("the whole transcript: run the same command with --json", err=True)


def _warn_no_tool_response(result: RunResult) -> None:
    error(f"warning: every tool call failed ({len(result.tool_calls)}): the answer rests on no tool response")


def _build_agent(
    bundle: Path,
    backend: str | None,
    model: str | None,
    max_steps: int | None,
    seed: int | None = None,
    adapter: Path | None = None,
    binding: str | None = None,
    threads: int | None = None,
) -> Agent:
    check_backend(backend)  # the options' own errors name the option, not the bundle
    check_binding(binding)
    b = load_bundle_or_exit(bundle, backend)  # exit 2 (EXIT_BAD_INPUT)
    overrides = {} if max_steps is None else {"max_steps": max_steps}
    try:
        agent = b.make_agent(
            backend=backend, model=model, seed=seed, adapter=adapter, binding=binding, **overrides
        )
    except (ValueError, TypeError) as exc:
        raise fail(f"{bundle}: {exc}", EXIT_BAD_INPUT) from None
    from agentkit.backends.embedded import EmbeddedBackend

    if threads is not None and not isinstance(agent.backend, EmbeddedBackend):  # as --adapter and --binding
        kind = backend or b.model_section.backend
        raise fail(
            f"{bundle}: --threads applies to the embedded backend only (backend is {kind!r})", EXIT_BAD_INPUT
        )
    if isinstance(agent.backend, EmbeddedBackend):  # a checkpoint that cannot load is bad input (exit 2)
        if threads is not None:
            agent.backend.threads = threads
        try:
            _ = agent.backend.chat_model
        except (BackendError, ValueError) as exc:  # ValueError: a bad $AGENTKIT_THREADS
            raise fail(str(exc), EXIT_BAD_INPUT) from None
    return agent


def run_command(
    bundle: Path = _BUNDLE,
    question: str = typer.Argument(
        ..., help="The user message (one that starts with '-' goes after --: -- \"-5 degrees?\")."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the run result as one JSON object (no rendering)."
    ),
    backend: str | None = _BACKEND,
    model: str | None = _MODEL,
    max_steps: int | None = _MAX_STEPS,
    seed: int | None = _SEED,
    image: list[Path] | None = typer.Option(None, "--image", help=_IMAGE_HELP),
    vision_budget: VisionBudget = None,
    adapter: Adapter = None,
    binding: str | None = _BINDING,
    threads: int | None = _THREADS,
) -> None:
    """Answer one question with a bundle's agent, rendering each tool call and tool response.

    Exit status: 0 answered; 1 no answer (or an empty one); 2 bad input or a question too long; 3 every tool call failed.
    """
    if not question.strip():
        raise fail("the question is empty: pass the user message as the second argument", EXIT_BAD_INPUT)
    images = check_images_or_exit(image, vision_budget)
    with prints_to_stderr(json_out):
        agent = _build_agent(bundle, backend, model, max_steps, seed, adapter, binding, threads)
    console = Console()
    renderer = None if json_out else RichRenderer(console)
    try:
        with prints_to_stderr(json_out):
            result = agent.run(question, on_event=renderer, images=images, vision_budget=vision_budget)
    except (AgentRunError, BackendError) as exc:
        stopped = exc if isinstance(exc, AgentRunError) else None
        kind = "BackendError" if stopped is None else type(exc).__name__
        if json_out:
            partial = None if stopped is None else stopped.result.to_dict()
            out = {"error": {"type": kind, "message": str(exc)}, "result": partial}
            typer.echo(json_text(out))
        elif stopped is not None:
            _print_failure(stopped, json_hint=True)
        else:
            error(f"BackendError: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT if isinstance(exc, PromptTooLong) else EXIT_RUN_FAILED) from None
    except ImageError as exc:  # e.g. a checkpoint without a vision tower
        raise fail(f"error: {exc}", EXIT_BAD_INPUT) from None
    except AgentKitError as exc:  # an MCP server that failed to start, a schema it cannot enforce
        raise fail(f"{type(exc).__name__}: {exc}", EXIT_RUN_FAILED) from None
    if json_out:
        typer.echo(result.to_json())
    else:
        assert renderer is not None
        renderer.answer(result)  # with its warning when no_tool_response(result)
    if not (result.answer or "").strip():  # no answer, as a stopped run (a tiny max_new_tokens, say)
        error(f"error: {EMPTY_ANSWER}")
        raise typer.Exit(EXIT_RUN_FAILED)
    if no_tool_response(result):
        if json_out:
            _warn_no_tool_response(result)
        raise typer.Exit(EXIT_NO_TOOL_RESPONSE)


@dataclass
class _Chat:
    """The REPL of ``agentkit chat``: its session, the images attached to the next message (``pending``), the
    vision budget and the ``--save`` file."""

    session: ChatSession
    pending: list[str]
    budget: int | None
    save_to: Path | None
    console: Console = field(default_factory=Console)

    def command(self, text: str) -> bool:
        """Run one ``/command``; True for ``/exit`` and ``/quit``. Problems are printed, never raised."""
        command, _, arg = text.partition(" ")
        arg = arg.strip()
        if command in ("/save", "/image") and arg.startswith("~"):
            arg = str(Path(arg).expanduser())  # a path typed at the prompt, as a shell would read it
        if command in ("/exit", "/quit") and not arg:
            return True
        conversation = self.session.conversation
        if command == "/reset" and not arg:
            self.session.reset()
            self.console.print("history cleared")
        elif command == "/history" and not arg:
            if not conversation.messages:
                self.console.print("the history is empty")
            for m in conversation.messages:
                self.console.print(Text.assemble((f"{m['role']}> ", "bold"), _shown(m["content"])))
        elif command in ("/image", "/save") and not (arg or (command == "/save" and self.save_to)):
            error(f"usage: {command} PATH")
        elif command == "/image":
            try:
                open_image(arg)
            except ImageError as exc:
                error(f"/image: {exc}")
                return False
            self.pending.append(arg)
            self.console.print(f"{len(self.pending)} image(s) attached to your next message")
        elif command == "/save":
            target = arg or str(self.save_to)
            if self.save(target, "/save"):
                self.console.print(
                    f"saved {conversation.turns} turn(s) to {target}", markup=False, soft_wrap=True
                )
        elif command in ("/exit", "/quit", "/reset", "/history"):
            error(f"{command} takes no argument (got {arg!r})")
        else:
            error(
                f"unknown command {command!r}; commands: {', '.join(CHAT_COMMANDS)} "
                "(start a message with // to send one that begins with /)"
            )
        return False

    def turn(self, text: str, renderer: RichRenderer) -> None:
        """Send one message with the attached images (used up when sent or refused). A failed turn prints its
        one-line reason and leaves the history unchanged."""
        try:
            result = self.session.send(
                text, on_event=renderer, images=self.pending, vision_budget=self.budget
            )
        except ImageError as exc:
            error(f"error: {exc}")
            self.pending = []
            return
        except AgentRunError as exc:
            _print_failure(exc, json_hint=False)
            return
        except BackendError as exc:
            error(f"BackendError: {exc}")
            return
        except KeyboardInterrupt:  # Ctrl-C stops this turn, not the session (at the prompt it ends the chat)
            error("interrupted: the turn was dropped, the history is as before it (/exit or Ctrl-D to leave)")
            return
        self.pending = []
        self.console.print(Text.assemble(("agent> ", "bold blue"), _shown(result.answer or "")))  # not markup
        if not (result.answer or "").strip():
            error(f"warning: {EMPTY_ANSWER}")
        if no_tool_response(result):  # as `run` warns under its answer
            _warn_no_tool_response(result)
        if self.save_to is not None:
            self.save(self.save_to, "--save")

    def save(self, target: str | Path, option: str) -> bool:
        """Write the history to ``target``; a failure is printed (the chat and its history go on)."""
        try:
            self.session.save(target)
        except OSError as exc:
            error(
                f"{option}: cannot write {target}: {exc.strerror or exc}; the conversation is kept "
                "(/save PATH writes it elsewhere)"
            )
            return False
        return True


def _check_save_target(save: Path) -> None:
    """Raise the exit of a ``--save`` path that cannot be a file: a directory, or a missing folder."""
    if save.is_dir():
        raise fail(f"--save {save}: is a directory; give the path of a file", EXIT_BAD_INPUT)
    if not save.parent.is_dir():
        raise fail(f"--save {save}: folder {save.parent} does not exist", EXIT_BAD_INPUT)


def chat_command(
    bundle: Path = _BUNDLE,
    backend: str | None = _BACKEND,
    model: str | None = _MODEL,
    load: Path | None = typer.Option(None, "--load", help="Resume a conversation saved as JSON."),
    save: Path | None = typer.Option(None, "--save", help="Save the conversation as JSON after every turn."),
    max_steps: int | None = _MAX_STEPS,
    seed: int | None = _SEED,
    image: list[Path] | None = typer.Option(
        None, "--image", help=_IMAGE_HELP + " Attached to the first message; /image PATH attaches later ones."
    ),
    vision_budget: VisionBudget = None,
    adapter: Adapter = None,
    binding: str | None = _BINDING,
    threads: int | None = _THREADS,
) -> None:
    """Multi-turn chat with a bundle's agent. Commands: /exit, /quit, /reset, /history, /save PATH,
    /image PATH (attach an image to the next message); start a message with // to send one that begins
    with /."""
    images = check_images_or_exit(image, vision_budget)
    if save is not None:
        _check_save_target(save)
    agent = _build_agent(bundle, backend, model, max_steps, seed, adapter, binding, threads)
    conversation = None
    if load is not None:
        try:
            conversation = Conversation.load(load)
        except OSError as exc:
            raise fail(
                f"--load {load}: cannot read the conversation file: {exc.strerror or exc}", EXIT_BAD_INPUT
            ) from None
        except ValueError as exc:
            raise fail(str(exc), EXIT_BAD_INPUT) from None
    chat = _Chat(agent.chat(conversation), images, vision_budget, save)
    console, renderer = chat.console, RichRenderer(chat.console)
    console.print(
        f"[bold]{agent.name}[/bold] on {agent.backend.name} with tools: {', '.join(agent.tools) or '(none)'}"
        f" - {chat.session.conversation.turns} earlier turn(s). Commands: {', '.join(CHAT_COMMANDS)}.",
        highlight=False,
    )
    while True:
        try:
            line = console.input("[bold magenta]you>[/bold magenta] ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            break
        text = line.strip()
        if not text:
            continue
        if text.startswith("//"):  # a message that begins with "/"
            text = text[1:]
        elif text.startswith("/"):
            if chat.command(text):
                break
            continue
        chat.turn(text, renderer)
