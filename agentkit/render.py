"""Rich terminal rendering of a run: each model turn's thinking, every tool call and its tool response."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from agentkit.events import Event, ModelResponded, PromptTrimmed, ToolCallFinished, ToolCallStarted
from agentkit.result import RunResult

#: C0 and C1 control characters but newline and tab (ESC starts colour, cursor and title sequences; CR rewrites
#: the line; BEL rings), and lone surrogates (no encoding can write them: printing one raised UnicodeEncodeError).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """``text`` to print on a terminal: each control character other than newline and tab written as ``\\xNN``
    (a lone surrogate as ``\\udXXX``), so a tool response or a model's answer cannot restyle, retitle, clear or
    overwrite the terminal, nor fail to print."""
    return _CONTROL.sub(lambda m: f"\\{'x' if ord(m.group()) < 256 else 'u'}{ord(m.group()):02x}", text)


def no_tool_response(result: RunResult) -> bool:
    """True when the run made tool calls and every one failed: its answer rests on no tool response."""
    return bool(result.tool_calls) and not any(c.ok for c in result.tool_calls)


def _short(text: str, limit: int) -> str:
    text = terminal_safe(text.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_arguments(arguments: Any) -> str:
    """A call's arguments as ``k=JSON, ...`` (text that is not a dict as it is), safe on a terminal."""
    if isinstance(arguments, dict):
        return terminal_safe(
            ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items())
        )
    return terminal_safe(str(arguments))


def call_text(prefix: str, name: str, style: str, arguments: str | None = None) -> Text:
    """``prefix`` and the tool ``name`` (bold) in ``style``, then ``(arguments)`` when given."""
    line = Text(prefix, style=style)
    line.append(terminal_safe(name), style=f"bold {style}")
    if arguments is not None:
        line.append(f"({arguments})", style=style)
    return line


class RichRenderer:
    """An event callback printing the run as it happens on ``console`` (default: a new stdout one): tool calls'
    arguments, tool responses and thinking (dim, if ``show_thinking``) cut to ``max_chars`` characters."""

    def __init__(
        self, console: Console | None = None, *, max_chars: int = 400, show_thinking: bool = True
    ) -> None:
        self.console = console or Console()
        self.max_chars = max_chars
        self.show_thinking = show_thinking

    def __call__(self, event: Event) -> None:
        """Render one :mod:`agentkit.events` event."""
        c = self.console
        if isinstance(event, ModelResponded):
            turn = event.turn
            if self.show_thinking and turn.thinking:
                c.print(Text(f"  thinking: {_short(turn.thinking, self.max_chars)}", style="dim italic"))
            if turn.tool_calls and turn.text.strip():
                c.print(Text(f"  {_short(turn.text, self.max_chars)}", style="dim"))
        elif isinstance(event, PromptTrimmed):
            c.print(
                Text(
                    f"  (prompt of {event.prompt_tokens} tokens over the model's {event.limit}: the oldest "
                    f"{event.dropped_messages} message(s) are left out)",
                    style="dim yellow",
                )
            )
        elif isinstance(event, ToolCallStarted):
            c.print(
                call_text("  → ", event.name, "cyan", _short(call_arguments(event.arguments), self.max_chars))
            )
        elif isinstance(event, ToolCallFinished):
            rec = event.record
            if rec.ok:
                line = call_text("  ← ", rec.name, "green")
                line.append(f" [{rec.seconds * 1000:.0f} ms]: ", style="green")
                line.append(_short(rec.content, self.max_chars))
            else:
                shown = rec.error_kind in ("unknown_tool", "invalid_arguments", "decode")
                args = _short(call_arguments(rec.arguments), self.max_chars) if shown else None
                line = call_text("  ✗ ", rec.name, "red", args)
                line.append(f": {_short(rec.error or '', self.max_chars)}", style="red")
            c.print(line)

    def answer(self, result: RunResult) -> None:
        """Print the final answer in a panel with step, token and time totals, then a warning line when the
        run made tool calls and every one of them failed (the answer then rests on no tool response)."""
        sub = (
            f"{len(result.steps)} step(s), {len(result.tool_calls)} tool call(s), "
            f"{result.usage.total_tokens} tokens, {result.timing.total_seconds:.2f} s"
        )
        answer = Text(terminal_safe(result.answer or ""))
        if not answer.plain.strip():
            answer = Text("(empty)", style="dim")  # said so, not an empty panel
        self.console.print(Panel(answer, title="answer", subtitle=sub, border_style="blue"))
        calls = result.tool_calls
        if no_tool_response(result):
            last = calls[-1]
            self.console.print(
                Text(
                    f"warning: every tool call failed ({len(calls)}), so the answer above had no tool response "
                    f"to draw on; the last: {terminal_safe(last.name)}: {last.error_kind}: "
                    f"{_short(last.error or '', 200)}",
                    style="bold yellow",
                )
            )
