"""``agentkit specialize BUNDLE --out DIR``: LoRA fine-tuning of a checkpoint on a bundle's own tools."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

from agentkit.commands import fail, finite, prints_to_stderr
from agentkit.errors import AgentKitError
from model.threads import MAX_THREADS


def bundle_declarations(bundle_path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The tool declarations as the bundle's agent sends them (its MCP servers started to list theirs) and its
    system prompt; BundleError, AgentKitError (an MCP server) or OSError when that fails."""
    from agentkit.backends.scripted import ScriptedBackend
    from agentkit.bundle import load_bundle

    bundle = load_bundle(bundle_path)
    agent = bundle.make_agent(ScriptedBackend([]))
    if not bundle.toolsets:
        return agent.declarations(), bundle.system_prompt

    async def listed() -> list[dict[str, Any]]:
        async with agent:  # starts the MCP servers, lists their tools, stops them
            return list(agent.declarations())

    return asyncio.run(listed()), bundle.system_prompt


def specialize_command(
    ctx: typer.Context,
    bundle: Path = typer.Argument(..., help="Bundle file (YAML) whose tools to teach."),
    out: Path = typer.Option(
        ..., "--out", help="Folder for the adapter and report.json (new or an earlier adapter)."
    ),
    base: str | None = typer.Option(
        None, "--base", help="Base checkpoint (default: the embedded agentkit-tiny)."
    ),
    minutes: float = typer.Option(
        20.0, "--minutes", callback=finite(0.1), help="Fine-tuning time budget in minutes (at least 0.1)."
    ),
    lora_rank: int = typer.Option(8, "--lora-rank", min=1, max=256, help="LoRA rank."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data, the noise and the evaluation."),
    threads: int | None = typer.Option(
        None, "--threads", min=1, max=MAX_THREADS, help="torch threads (default: every core)."
    ),
    n_eval: int = typer.Option(100, "--eval", min=1, help="Held-out dialogues scored before and after."),
    lr: float = typer.Option(
        6e-3, "--lr", callback=finite(0.0, inclusive=False), help="Peak learning rate of the LoRA weights."
    ),
    device: str | None = typer.Option(
        None, "--device", help="cpu or cuda (default: cuda where torch sees a GPU)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object at the end."),
) -> None:
    """Generate training dialogues for a bundle's tools, fine-tune LoRA adapters on the base checkpoint for
    at most --minutes, save the adapter to --out and report held-out exact-call accuracy before and after.
    Load the result with --adapter DIR on run, chat, generate and serve, or `model: {adapter: DIR}` in a
    bundle."""
    import torch

    from evals.heldout import evaluate_examples
    from model.checkpoint.loading import CheckpointError
    from model.training.specialize import SpecializeConfig, specialize

    try:
        with prints_to_stderr(as_json):
            declarations, system_prompt = bundle_declarations(bundle)
    except AgentKitError as exc:  # an invalid bundle, an MCP server that does not start
        raise fail(f"error: {exc}") from None
    except OSError as exc:
        raise fail(f"error: {bundle}: cannot read bundle: {exc}") from None
    if not declarations:
        raise fail(f"error: {bundle}: the bundle declares no tools: there is nothing to specialize on")
    options = {k: v for k, v in ctx.params.items() if k != "as_json"}  # the fields of SpecializeConfig
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = SpecializeConfig(**{**options, "bundle": str(bundle), "out": str(out), "device": device})
    try:
        report = specialize(
            cfg,
            declarations,
            system_prompt,
            log=lambda line: typer.echo(line, err=as_json),
            evaluate=evaluate_examples,
        )
    except (CheckpointError, ValueError) as exc:
        raise fail(f"error: {exc}") from None
    if as_json:
        typer.echo(json.dumps({k: v for k, v in report.items() if k not in ("before", "after")}))
