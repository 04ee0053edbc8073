"""Sub-commands of the ``agentkit`` CLI, one module per command group (registered in :mod:`agentkit.cli`), and
what several of them share: error exits, option checks, option types, bundle loading."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_args

import typer
from typer.core import TyperCommand

from agentkit.backends import BACKENDS
from agentkit.errors import BundleError, BundleIssue
from agentkit.render import terminal_safe
from model.errors import CheckpointError
from model.heads.vision import ImageError, check_images
from model.threads import MAX_THREADS, apply_threads

if TYPE_CHECKING:
    from agentkit.bundle import Bundle

T = TypeVar("T")

#: Help of ``--threads`` (run, chat, generate, serve, eval).
THREADS_HELP = (
    "torch intra-op threads (default: $AGENTKIT_THREADS, else $OMP_NUM_THREADS, else 1 on a machine with at "
    "most 2 cores, else half the cores, at most 4: more threads than free cores collapse when another process "
    "is busy)."
)

# Options several commands take, as typer reads them from ``Annotated``.
Threads = Annotated[int | None, typer.Option("--threads", min=1, max=MAX_THREADS, help=THREADS_HELP)]
Device = Annotated[str, typer.Option(help="cpu or cuda.")]
DType = Annotated[str, typer.Option(help="float32, bfloat16 or float16.")]
Adapter = Annotated[
    Path | None,
    typer.Option(
        help="LoRA adapter folder from `agentkit specialize` (embedded backend), applied to the checkpoint."
    ),
]
VisionBudget = Annotated[
    int | None,
    typer.Option(
        help="Soft tokens per image (embedded model): 70, 140, 280 (default), 560 or 1120 (docs/AGENTS.md)."
    ),
]


class DashTextCommand(TyperCommand):
    """A command whose text argument may start with ``-``: an unknown short option (``-what is this``) adds a
    hint to pass the text after ``--``, quoting the user's own words (the argument the option came from and the
    plain words after it), else a placeholder. Subclasses set ``usage`` (``agentkit run BUNDLE``) and ``text``
    (``question``)."""

    usage, text = "agentkit COMMAND", "text"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes ``args``
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:  # click's NoSuchOption (typer keeps its click private): always raised again
            name, message = getattr(exc, "option_name", None), getattr(exc, "message", None)
            if isinstance(name, str) and isinstance(message, str) and not name.startswith("--"):
                hint = f"a {self.text} that starts with '-' goes after --: {self.usage} -- {_dash_text(name, given)}"
                setattr(exc, "message", f"{message}; {hint}")  # noqa: B010 (click's type is not importable)
            raise


def _dash_text(option: str, args: list[str]) -> str:
    """The shell-quoted words of ``args`` from the first that starts with ``option`` (``-w`` of ``-what``) up to
    the next option; ``"-TEXT"`` when none does."""
    start = next((i for i, a in enumerate(args) if a.startswith(option) and not a.startswith("--")), None)
    if start is None:
        return '"-TEXT"'
    words = [args[start]]
    for a in args[start + 1 :]:
        if a.startswith("-"):
            break
        words.append(a)
    text = " ".join(words)
    return shlex.quote(text) if any(c in text for c in '"$`\\!') else f'"{text}"'


def error(message: str) -> None:
    """Print ``message`` in red on stderr, unwrapped (FILE:LINE: messages stay greppable), control characters
    escaped."""
    typer.secho(terminal_safe(message), err=True, fg="red")


def fail(message: str, code: int = 2) -> typer.Exit:
    """:func:`error` ``message`` and return the :class:`typer.Exit` of ``code`` to raise."""
    error(message)
    return typer.Exit(code)


def finite(minimum: float, *, inclusive: bool = True) -> Callable[[float | None], float | None]:
    """The typer callback of a float option refusing NaN, infinities and a value below ``minimum`` (or at it,
    when not ``inclusive``); give the option no ``min=`` (click would call NaN out of range)."""

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise typer.BadParameter(f"must be a finite number, got {value}")
        if value < minimum or (value == minimum and not inclusive):
            raise typer.BadParameter(
                f"must be {'at least' if inclusive else 'greater than'} {minimum}, got {value}"
            )
        return value

    return check


def check_backend(backend: str | None) -> None:
    """Raise the exit of a ``--backend`` that names no backend; ``None`` (not given) passes."""
    if backend is not None and backend not in BACKENDS:
        raise fail(f"error: --backend: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def check_binding(binding: str | None) -> None:
    """Raise the exit of a ``--binding`` that is not one of the bundle schema's names; ``None`` passes."""
    from agentkit.bundle_sections import BindingName

    names = get_args(BindingName)
    if binding is not None and binding not in names:
        raise fail(f"error: --binding must be {', '.join(names[:-1])} or {names[-1]}, got {binding!r}")


def load_or_exit(threads: int | None, load: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``load(*args, **kwargs)`` (a checkpoint, a model, an engine) on ``threads`` torch threads; a bad
    ``$AGENTKIT_THREADS`` or a checkpoint that cannot load exits 2 with one line."""
    try:
        apply_threads(threads)
    except ValueError as exc:
        raise fail(f"error: {exc}") from None
    try:
        return load(*args, **kwargs)
    except CheckpointError as exc:
        raise fail(f"error: {exc}") from None


def check_images_or_exit(images: list[Path] | None, vision_budget: int | None) -> list[str]:
    """The image files as paths, each checked before any model loads (a bad one: one line and exit 2)."""
    try:
        check_images(images, vision_budget)
    except ImageError as exc:
        raise fail(f"error: {exc}") from None
    return [str(p) for p in images or ()]


def prints_to_stderr(json_out: bool) -> contextlib.AbstractContextManager[Any]:
    """With ``--json``, what a bundle's modules and tools print goes to stderr, so stdout is the JSON alone."""
    return contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext()


def load_bundle_or_exit(
    path: str | Path, backend: str | None, *, quiet: bool = False, issues_json: bool = False
) -> Bundle:
    """The bundle at ``path`` (what it prints on stderr when ``quiet``); an invalid or unreadable one exits 2
    with its problems (as ``{"ok": false, "issues": [...]}`` on stdout when ``issues_json``)."""
    from agentkit.bundle import load_bundle

    try:
        with prints_to_stderr(quiet):
            return load_bundle(path, backend=backend)
    except BundleError as exc:
        if not issues_json:
            raise fail(str(exc)) from None
        issues = exc.issues
    except OSError as exc:
        if not issues_json:
            raise fail(f"{path}: cannot read bundle: {exc.strerror or exc}") from None
        issues = [BundleIssue(str(path), None, None, "", f"cannot read bundle: {exc.strerror or exc}")]
    typer.echo(
        json.dumps({"ok": False, "issues": [dataclasses.asdict(i) for i in issues]}, ensure_ascii=False)
    )
    raise typer.Exit(2)
