"""``agentkit eval bfcl`` (BFCL AST accuracy) and ``agentkit eval heldout`` (held-out synthetic split)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from agentkit.commands import Threads, check_binding, fail, load_or_exit

eval_app = typer.Typer(
    help="Evaluate a checkpoint (BFCL AST scoring, held-out synthetic data).", no_args_is_help=True
)


def _chat_model(checkpoint: str | None, threads: int | None, binding: str) -> Any:
    """The checkpoint's ChatModel, after checking ``binding``; a bad option or checkpoint: one red line, exit 2."""
    from model.turn.chat import ChatModel

    check_binding(binding)
    return load_or_exit(threads, ChatModel.load, checkpoint)


# The options both eval commands take.
_BINDING = typer.Option(
    "auto",
    "--binding",
    help="Binder: auto (the checkpoint's default), copy-head, or none (the checkpoint alone).",
)
_CHECKPOINT = typer.Option(
    None,
    "--checkpoint",
    "--model",
    "-m",
    help="Checkpoint folder (default: embedded agentkit-tiny); --model as in `agentkit run`.",
)


@eval_app.command("bfcl")
def bfcl_command(
    category: str = typer.Option(
        "simple_python",
        "--category",
        "-c",
        help="simple_python | multiple | parallel | parallel_multiple: the shipped file scored, and how calls "
        "match (parallel ones in any order), with --data too",
    ),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help="Score only the first N questions."),
    data: Path | None = typer.Option(
        None,
        "--data",
        help="BFCL-format question file (one JSON object per line, .json or .json.gz) instead of the shipped one; "
        "--category still says how its calls match (--category parallel for parallel calls).",
    ),
    answers: Path | None = typer.Option(
        None, "--answers", help="Ground-truth file for --data; omit it for irrelevance scoring."
    ),
    checkpoint: str | None = _CHECKPOINT,
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object (category, n, accuracy, parse_rate, mean_latency_s, results).",
    ),
    seed: int = typer.Option(0, "--seed", help="Denoising seed per question."),
    threads: Threads = None,
    unconstrained: bool = typer.Option(
        False, "--unconstrained", help="Generate without the tool-call grammar."
    ),
    binding: str = _BINDING,
) -> None:
    """Score a checkpoint on BFCL with AST matching (the four categories ship in evals/bfcl_data)."""
    from evals.bfcl import CATEGORIES, evaluate, load_category

    console = Console(stderr=True)
    if category not in CATEGORIES:  # with --data too: the category says how calls match
        raise fail(f"unknown BFCL category {category!r}; choose one of {', '.join(CATEGORIES)}")
    try:
        questions, gt = load_category(category if data is None else None, data=data, answers=answers)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:  # missing, a directory, unreadable: one line naming the file
        raise fail(
            f"error: {exc.filename or data}: cannot read the BFCL file: {exc.strerror or exc}"
        ) from None
    if not questions:
        raise fail(f"no BFCL questions read from {data or category}")
    label = category if data is None or answers is not None else "irrelevance"
    cm = _chat_model(checkpoint, threads, binding)

    def chat(
        messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool, str]:
        try:
            out = cm.chat(
                messages, tools, tool_choice="auto", seed=seed, constrained=not unconstrained, binder=binding
            )
        except Exception as exc:  # a malformed unconstrained output counts as a parse failure
            return [], False, f"<error: {exc}>"
        return [(c.name, c.arguments) for c in out.tool_calls], True, out.raw

    done = [0]

    def progress(r: dict[str, Any]) -> None:
        done[0] += 1
        if not json_out:
            mark = "[green]ok" if r["correct"] else f"[red]{r['error_type']}"
            console.print(f"{done[0]:4d} {r['id']}: {mark}[/] ({r['latency_s']:.2f}s)")

    rep = evaluate(label, questions, gt, chat, limit=limit, on_result=progress)
    if json_out:
        typer.echo(json.dumps(rep.to_json()))
        return
    typer.echo(
        f"BFCL {rep.category}: n={rep.n} accuracy={rep.accuracy:.3f} parse_rate={rep.parse_rate:.3f} "
        f"mean_latency_s={rep.mean_latency_s:.3f}"
    )


@eval_app.command("heldout")
def heldout_command(
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="Number of held-out examples."),
    checkpoint: str | None = _CHECKPOINT,
    seed: int = typer.Option(0, "--seed", help="Data seed (the held-out stream of this seed)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    threads: Threads = None,
    binding: str = _BINDING,
) -> None:
    """Exact-match accuracy on the held-out synthetic split (calls order-free; prose turns: no call made)."""
    from evals.heldout import evaluate_heldout

    cm = _chat_model(checkpoint, threads, binding)
    rep = evaluate_heldout(cm, limit=limit, seed=seed, binder=binding)
    if json_out:
        typer.echo(json.dumps(rep))
        return
    typer.echo(
        f"held-out: n={rep['n']} accuracy={rep['accuracy']:.3f} mean_latency_s={rep['mean_latency_s']:.3f}"
    )
    for kind, v in sorted(rep["by_kind"].items()):
        typer.echo(f"  {kind:18s} n={v['n']:4d} accuracy={v['accuracy']:.3f}")
    for label in ("unfit_in_prose", "fit_with_a_call"):
        typer.echo(f"  {label:18s} n={rep[label]['n']:4d} share={rep[label]['accuracy']:.3f}")
    for kind, v in rep["argument_accuracy"].items():
        typer.echo(f"  arguments {kind:8s} n={v['n']:4d} right={v['accuracy']:.3f}")
