"""``agentkit run BUNDLE "question"`` (one shot) and ``agentkit chat BUNDLE`` (multi-turn REPL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from agentkit.agent import Agent

#: Exit status when the run stopped without an answer or the backend failed.
EXIT_RUN_FAILED = 1
#: Exit status for an invalid bundle or option, and for a question that does not fit the model's context.
EXIT_BAD_INPUT = 2


def _error(message: str) -> None:
    """Print an error to stderr, unwrapped (file:line: messages stay greppable)."""
    typer.secho(message, err=True, fg="red")


def _build_agent(bundle: Path, backend: str | None, model: str | None, max_steps: int | None) -> Agent:
    from agentkit.bundle import load_bundle
    from agentkit.errors import BundleError

    try:
        b = load_bundle(bundle)
    except BundleError as exc:
        _error(str(exc))
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except OSError as exc:
        _error(f"{bundle}: cannot read bundle: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    overrides: dict[str, Any] = {}
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    try:
        return b.make_agent(backend=backend, model=model, **overrides)
    except (ValueError, TypeError) as exc:
        _error(f"{bundle}: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None


def run_command(
    bundle: Path = typer.Argument(..., help="Bundle file (YAML, see docs/BUNDLES.md)."),
    question: str = typer.Argument(..., help="The user message."),
    json_out: bool = typer.Option(
        False, "--json", help="Print the run result as one JSON object (no rendering)."
    ),
    backend: str | None = typer.Option(
        None, "--backend", "-b", help="embedded | openai | scripted (default: the bundle's)."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Checkpoint path/id, served model name, or script file (default: the bundle's).",
    ),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the bundle's step limit."),
) -> None:
    """Answer one question with a bundle's agent, rendering each tool call and tool response."""
    from rich.console import Console

    from agentkit.errors import AgentRunError, BackendError, PromptTooLong
    from agentkit.render import RichRenderer

    if not question.strip():
        _error("the question is empty: pass the user message as the second argument")
        raise typer.Exit(EXIT_BAD_INPUT)
    agent = _build_agent(bundle, backend, model, max_steps)
    console = Console()
    renderer = None if json_out else RichRenderer(console)
    try:
        result = agent.run(question, on_event=renderer)
    except AgentRunError as exc:
        if json_out:
            typer.echo(
                json.dumps(
                    {
                        "error": {"type": type(exc).__name__, "message": str(exc)},
                        "result": exc.result.to_dict(),
                    },
                    ensure_ascii=False,
                    default=str,
                )
            )
        elif isinstance(exc, PromptTooLong):
            _error(f"PromptTooLong: {exc.reason}")
        else:
            _error(f"{type(exc).__name__}: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT if isinstance(exc, PromptTooLong) else EXIT_RUN_FAILED) from None
    except BackendError as exc:
        if json_out:
            typer.echo(json.dumps({"error": {"type": "BackendError", "message": str(exc)}, "result": None}))
        else:
            _error(f"BackendError: {exc}")
        raise typer.Exit(EXIT_RUN_FAILED) from None
    if json_out:
        typer.echo(result.to_json())
    else:
        assert renderer is not None
        renderer.answer(result)


def chat_command(
    bundle: Path = typer.Argument(..., help="Bundle file (YAML, see docs/BUNDLES.md)."),
    backend: str | None = typer.Option(
        None, "--backend", "-b", help="embedded | openai | scripted (default: the bundle's)."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Checkpoint path/id, served model name, or script file (default: the bundle's).",
    ),
    load: Path | None = typer.Option(None, "--load", help="Resume a conversation saved as JSON."),
    save: Path | None = typer.Option(None, "--save", help="Save the conversation as JSON after every turn."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the bundle's step limit."),
) -> None:
    """Multi-turn chat with a bundle's agent. Commands: /exit, /reset, /history, /save PATH."""
    from rich.console import Console

    from agentkit.errors import AgentRunError, BackendError, PromptTooLong
    from agentkit.history import Conversation
    from agentkit.render import RichRenderer

    agent = _build_agent(bundle, backend, model, max_steps)
    console = Console()
    conversation = None
    if load is not None:
        try:
            conversation = Conversation.load(load)
        except (OSError, ValueError) as exc:
            _error(str(exc))
            raise typer.Exit(EXIT_BAD_INPUT) from None
    session = agent.chat(conversation)
    renderer = RichRenderer(console)
    console.print(
        f"[bold]{agent.name}[/bold] on {agent.backend.name} with tools: {', '.join(agent.tools) or '(none)'}"
        f" - {session.conversation.turns} earlier turn(s). /exit to quit.",
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
        if text in ("/exit", "/quit"):
            break
        if text == "/reset":
            session.reset()
            console.print("history cleared")
            continue
        if text == "/history":
            for m in session.conversation.messages:
                console.print(f"[bold]{m['role']}>[/bold] {m['content']}", highlight=False)
            continue
        if text.startswith("/save"):
            target = text[5:].strip() or (str(save) if save else "")
            if not target:
                _error("usage: /save PATH")
                continue
            session.save(target)
            console.print(f"saved {session.conversation.turns} turn(s) to {target}")
            continue
        try:
            result = session.send(text, on_event=renderer)
        except PromptTooLong as exc:
            _error(f"PromptTooLong: {exc.reason}")
            continue
        except (AgentRunError, BackendError) as exc:
            _error(f"{type(exc).__name__}: {exc}")
            continue
        console.print(f"[bold blue]agent>[/bold blue] {result.answer}", highlight=False)
        if save is not None:
            session.save(save)


def register(app: typer.Typer) -> None:
    """Add the ``run`` and ``chat`` commands to the ``agentkit`` CLI."""
    app.command("run")(run_command)
    app.command("chat")(chat_command)
