"""``agentkit generate``: run the embedded runtime on a prompt, optionally showing the canvas denoise live."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.text import Text

from agentkit.commands import (
    Adapter,
    DashTextCommand,
    Device,
    DType,
    Threads,
    VisionBudget,
    check_images_or_exit,
    fail,
    load_or_exit,
)
from agentkit.render import call_arguments, call_text, terminal_safe
from grammar.parse import ToolCallParseError, parse_tool_calls
from model.heads.vision import ImageError
from model.turn.limits import PromptTooLong


def _live_renderer(tokenizer: Any) -> tuple[Any, Any]:
    """Return ``(live, callback)``: a rich Live view where accepted tokens are firm and noise is dim."""
    from rich.live import Live

    from model.runtime import CanvasEvent, StepEvent

    committed: list[str] = []
    live = Live(Text(""), refresh_per_second=20, transient=False)

    def decode(toks: list[int]) -> str:
        return str(tokenizer.decode(toks, skip_special_tokens=False))

    def on_event(ev: StepEvent | CanvasEvent) -> None:
        if isinstance(ev, CanvasEvent):
            committed.append(decode([t for t in ev.tokens[0].tolist() if t != tokenizer.pad_token_id]))
            live.update(Text("".join(committed)))
            return
        draft = Text("".join(committed))
        acc = ev.accepted[0].tolist()
        for t, a, f in zip(ev.argmax[0].tolist(), acc, ev.fixed[0].tolist(), strict=True):
            draft.append(decode([t]), style="bold green" if f else ("bold" if a else "dim"))
        mean_h = float(ev.entropy[0].mean())
        status = Text(
            f"\ncanvas {ev.canvas_index} step {ev.step}  accepted {sum(acc)}/{len(acc)}  mean entropy {mean_h:.3f}",
            style="cyan",
        )
        live.update(Group(draft, status))

    return live, on_event


def _readable(text: str, plain: str) -> dict[str, Any]:
    """``{"answer", "thinking", "tool_calls", "error"}`` of a decoded answer (``plain``, without control tokens,
    is shown when the tool-call syntax is malformed)."""
    try:
        parsed = parse_tool_calls(text, syntax="gemma")
    except ToolCallParseError as exc:
        return {
            "answer": plain.strip(),
            "thinking": None,
            "tool_calls": [],
            "error": f"malformed tool call: {exc}",
        }
    calls = [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]
    return {"answer": parsed.text, "thinking": parsed.thinking, "tool_calls": calls, "error": None}


def _check_input(prompt: str, image: list[Path] | None, raw_prompt: bool, vision_budget: int | None) -> None:
    """Exit 2 with one line for an empty prompt, images with ``--raw-prompt``, or an unusable image."""
    if not prompt.strip():
        raise fail("error: the prompt is empty: pass the text to answer as the argument")
    if image and raw_prompt:
        raise fail("error: --image needs the chat template: drop --raw-prompt")
    check_images_or_exit(image, vision_budget)


def _prompt_ids(
    ck: Any, prompt: str, raw_prompt: bool, image: list[Path] | None, vision_budget: int | None
) -> tuple[Any, dict[str, Any]]:
    """``([1, P] int64 prompt ids on the model's device, image keyword arguments of generate)``: the prompt as
    is (``--raw-prompt``) or as a user message, images first; ImageError for an image the checkpoint cannot read."""
    import torch

    from model.turn.chat import ChatModel

    device = ck.model.device
    if raw_prompt:
        return ck.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(device), {}
    content: Any = prompt  # the question is text: control-token spellings in it stay text (never a fake turn)
    if image:
        content = [
            *({"type": "image_url", "image_url": {"url": str(p)}} for p in image),
            {"type": "text", "text": prompt},
        ]
    chat, vision = ChatModel(ck).encode_turn([{"role": "user", "content": content}], None, vision_budget)
    ids = torch.tensor([chat], dtype=torch.long, device=device)
    return ids, ({} if vision is None else vision.generate_kwargs())


def _print_readable(console: Any, shown: dict[str, Any]) -> None:
    """The answer as a person reads it: thinking (dim), text, tool calls as ``name(arguments)``, problems."""
    if shown["thinking"]:
        console.print(Text(f"thinking: {terminal_safe(shown['thinking'])}", style="dim italic"))
    if shown["answer"]:
        console.print(terminal_safe(shown["answer"]), markup=False, highlight=False)
    for c in shown["tool_calls"]:
        console.print(call_text("call ", c["name"], "cyan", call_arguments(c["arguments"])))
    if shown["error"]:
        console.print(
            Text(f"({shown['error']}; --raw-output shows the tokens)", style="yellow"), soft_wrap=True
        )
    if not (shown["answer"] or shown["tool_calls"] or shown["error"]):
        console.print(Text("(empty answer; --raw-output shows the tokens)", style="yellow"))


def _run(ck: Any, ids: Any, settings: Any, seed: int | None, live: bool, images: dict[str, Any]) -> Any:
    """``model.runtime.generate``, with the live canvas view when ``live``."""
    from model.runtime import generate

    ids = ids.to(ck.model.device)
    if not live:
        return generate(ck.model, ids, settings, seed=seed, **images)
    view, cb = _live_renderer(ck.tokenizer)
    with view:
        out = generate(ck.model, ids, settings, seed=seed, on_event=cb, **images)
    if not view.console.is_terminal:  # piped: the last frame ends without a newline
        view.console.line()
    return out


def _decoded(tok: Any, tokens: list[int], settings: Any) -> tuple[str, dict[str, Any]]:
    """The raw canvases and the readable answer (without pad and end-of-turn tokens)."""
    canvases = tok.decode(tokens, skip_special_tokens=False)
    new = [t for t in tokens if t != settings.pad_token_id]
    while new and new[-1] in settings.eos_token_ids:
        new.pop()
    return canvases, _readable(
        tok.decode(new, skip_special_tokens=False), tok.decode(new, skip_special_tokens=True)
    )


def _print_stats(console: Any, s: Any) -> None:
    """One line of generation stats, unwrapped also when piped."""
    console.print(
        f"[cyan]canvases {s.canvases}, steps per canvas {s.steps_per_canvas}, TPF {s.tokens_per_forward[0]:.2f}, "
        f"prefill {s.time_prefill_s * 1000:.0f} ms, decoder {s.time_decoder_s * 1000:.0f} ms, "
        f"sampling {s.time_sampling_s * 1000:.0f} ms, total {s.time_total_s * 1000:.0f} ms[/cyan]",
        soft_wrap=True,
    )


class GenerateCommand(DashTextCommand):
    """``generate``'s command: a prompt that starts with ``-`` is told to go after ``--``."""

    usage, text = "agentkit generate", "prompt"


def generate_command(
    prompt: str = typer.Argument(..., help="User message (rendered with the checkpoint's chat template)."),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Checkpoint folder or hub id (default: embedded)."
    ),
    live: bool = typer.Option(False, "--live", help="Show the canvas denoising in the terminal."),
    raw_prompt: bool = typer.Option(
        False, "--raw-prompt", "--raw", help="Use the prompt as is, without the chat template."
    ),
    raw_output: bool = typer.Option(
        False,
        "--raw-output",
        help="Print the raw canvases (control tokens and <pad> kept) instead of the readable answer.",
    ),
    max_new_tokens: int | None = typer.Option(
        None, min=1, help="Token budget (rounded up to whole canvases)."
    ),
    seed: int | None = typer.Option(0, help="Random seed (same seed, same prompt: same output)."),
    threads: Threads = None,
    device: Device = "cpu",
    dtype: DType = "float32",
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object: answer, thinking, tool_calls, error (a malformed call), raw (the canvases), stats.",
    ),
    image: list[Path] | None = typer.Option(
        None, "--image", help="An image the prompt is about (PNG, JPEG or WebP); repeat for several."
    ),
    vision_budget: VisionBudget = None,
    adapter: Adapter = None,
) -> None:
    """Generate an answer with the block-diffusion runtime and print it readably (tool calls as
    name(arguments)) with its stats; --raw-output prints the canvases' tokens as generated."""
    _check_input(prompt, image, raw_prompt, vision_budget)

    from model.checkpoint.loading import load_checkpoint

    ck = load_or_exit(threads, load_checkpoint, model, dtype=dtype, device=device, adapter=adapter)
    try:
        ids, images = _prompt_ids(ck, prompt, raw_prompt, image, vision_budget)
    except ImageError as exc:  # e.g. a checkpoint that cannot read images
        raise fail(f"error: {exc}") from None
    settings = ck.settings.replace(max_new_tokens=max_new_tokens)
    try:
        out = _run(ck, ids, settings, seed, live and not as_json, images)
    except PromptTooLong as exc:
        raise fail(f"error: PromptTooLong: {exc}") from None
    except ValueError as exc:  # empty --raw prompt, a seed beyond 64 bits
        raise fail(f"error: {exc}") from None
    canvases, shown = _decoded(ck.tokenizer, out.new_tokens[0].tolist(), settings)
    if as_json:
        typer.echo(json.dumps({**shown, "raw": canvases, "stats": out.stats.as_dict()}, ensure_ascii=False))
        return
    console = Console()
    if raw_output:
        console.print(canvases, markup=False, highlight=False, soft_wrap=True)
    else:
        _print_readable(console, shown)
    _print_stats(console, out.stats)
