"""What a tool returns, as the model sees it, and where a sync tool runs.

:func:`serialize_result` turns a return value into the response text; :func:`cap_output` /
:func:`cap_output_tokens` cut it to a budget in bytes or tokens, with a marker; :func:`run_sync_in_thread` runs a
sync tool on a daemon thread. A :class:`ToolContent` (text and images, e.g. from MCP) is its text with a note
per image, or on a backend with ``takes_images`` content parts within the agent's :class:`ToolImageLimits`
(:class:`ToolImageShare`).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import concurrent.futures
import contextvars
import dataclasses
import functools
import io
import queue
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pydantic
import pydantic.dataclasses
import pydantic_core

from model.heads.vision import ACCEPTED_FORMATS, DEFAULT_VISION_BUDGET, check_budget

# ---------------------------------------------------------------------------------------------- threads


class _DaemonThreadPool:
    """A pool of daemon threads, grown while every thread is busy (up to ``max_workers``): unlike
    ``ThreadPoolExecutor``'s, they are not joined at exit, so a hung tool cannot keep the process alive."""

    def __init__(self, max_workers: int = 64, name: str = "agentkit-tool") -> None:
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._idle = 0
        self._pending = 0
        self._threads = 0
        self.max_workers = max_workers
        self._name = name

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn()`` on a worker thread; returns its future."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._pending += 1
            if self._pending > self._idle and self._threads < self.max_workers:
                self._threads += 1
                t = threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True)
                t.start()
            self._queue.put((fut, fn))
        return fut

    def all_busy(self) -> bool:
        """Every one of the ``max_workers`` threads is running a call (a new call waits for one)."""
        with self._lock:
            return self._threads >= self.max_workers and self._idle == 0

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fut, fn = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            del fut, fn


_POOL = _DaemonThreadPool()


def tool_threads_all_busy() -> bool:
    """Every one of the :func:`tool_thread_limit` threads is running a call (a new call waits for one)."""
    return _POOL.all_busy()


def tool_thread_limit() -> int:
    """The most daemon threads sync tools run on at once (a call that finds them all busy waits for one)."""
    return _POOL.max_workers


def run_sync_in_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """``fn(*args, **kwargs)`` on agentkit's daemon tool threads, in a copy of the current context (as
    :func:`asyncio.to_thread`); call it from a running event loop and await the future."""
    ctx = contextvars.copy_context()
    return asyncio.wrap_future(_POOL.submit(functools.partial(ctx.run, fn, *args, **kwargs)))


def int_at_least(value: Any, low: int) -> bool:
    """``value`` is an ``int`` (not a ``bool``) >= ``low``: the check of the integer settings."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def prompt_tokens(backend: Any) -> int | None:
    """The backend's ``max_prompt_tokens`` when it tells a positive one (the embedded backend loads for it)."""
    try:
        tokens = getattr(backend, "max_prompt_tokens", None)
    except Exception:  # a backend that cannot tell (e.g. its checkpoint failed to load)
        return None
    return tokens if int_at_least(tokens, 1) else None


# -------------------------------------------------------------------------------------------------- Tool


#: Line appended to a tool response whose bytes were not valid UTF-8 (``{n}``: invalid byte sequences replaced).
INVALID_UTF8_NOTE = (
    "[agentkit: the tool output was not valid UTF-8; {n} invalid byte sequence(s) replaced with U+FFFD]"
)
_REPLACEMENT_UTF8 = "\ufffd".encode()


def decode_utf8(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    """``(text, n)``: bytes decoded as UTF-8, each of the ``n`` invalid sequences replaced with U+FFFD."""
    raw = bytes(data)
    text = raw.decode("utf-8", errors="replace")
    return text, text.count("\ufffd") - raw.count(_REPLACEMENT_UTF8)


def _decode_nested_bytes(value: Any) -> tuple[Any, int]:
    """``value`` with its nested bytes decoded by :func:`decode_utf8`, and the invalid sequences replaced."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return decode_utf8(value)
    if isinstance(value, pydantic.BaseModel):
        return _decode_nested_bytes(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _decode_nested_bytes(dataclasses.asdict(value))
    if isinstance(value, dict):
        items = [(_decode_nested_bytes(k), _decode_nested_bytes(v)) for k, v in value.items()]
        return {k: v for (k, _), (v, _) in items}, sum(a + b for (_, a), (_, b) in items)
    if isinstance(value, (list, tuple, set, frozenset)):
        pairs = [_decode_nested_bytes(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    return value, 0


def serialize_result(value: Any) -> str:
    """The tool response text of a return value: ``str`` as is, a :class:`ToolContent` as
    :meth:`ToolContent.as_text`, ``bytes`` decoded as UTF-8, a Pydantic model as its JSON, anything else as JSON
    via ``pydantic_core.to_json`` (``tolist()`` for arrays, ``str()`` for unknown types; NaN and infinities as
    strings). Invalid UTF-8, at the top or nested, becomes U+FFFD and a last line :data:`INVALID_UTF8_NOTE`.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, ToolContent):
        return value.as_text()
    if isinstance(value, (bytes, bytearray, memoryview)):
        text, bad = decode_utf8(value)
        return text + ("\n" + INVALID_UTF8_NOTE.format(n=bad) if bad else "")
    try:
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump_json()
        return pydantic_core.to_json(value, fallback=_json_fallback, inf_nan_mode="strings").decode()
    except pydantic_core.PydanticSerializationError:
        try:
            fixed, bad = _decode_nested_bytes(value)
        except RecursionError:  # a circular or too deep value: pydantic's error says which
            bad = 0
        if not bad:
            raise
    return (
        pydantic_core.to_json(fixed, fallback=_json_fallback, inf_nan_mode="strings").decode()
        + "\n"
        + INVALID_UTF8_NOTE.format(n=bad)
    )


def _json_fallback(value: Any) -> Any:
    """A value JSON has no type for: its ``tolist()`` (every value of an array), else ``str()``."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return tolist()
        except Exception:  # a tolist that needs arguments or fails: the text, as for any other type
            pass
    return str(value)


def longest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """The largest ``k`` in ``0..n`` with ``fits(k)``, by bisection (``fits`` is monotone; ``0`` when none)."""
    return bisect.bisect_left(range(1, n + 1), True, key=lambda k: not fits(k))


def _cut_marker(cut: int, total: int, limit: int, unit: str = "bytes") -> str:
    return f"\n[agentkit: cut {cut:,} of {total:,} bytes of this tool output (limit {limit:,} {unit})]"


def cap_output(text: str, limit: int | None) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8 (``None``: no limit), marker included.

    The head is kept, cut on a character boundary, and followed by one line
    ``[agentkit: cut N of M bytes of this tool output (limit L bytes)]`` (the marker alone when ``limit`` is
    smaller). Bytes, because with a byte-fallback tokenizer a byte limit is also a token limit.
    """
    if limit is None or len(text) <= limit // 4:  # 4 bytes per character at most: fits without encoding
        return text
    data = text.encode("utf-8", "surrogatepass")
    total = len(data)
    if total <= limit:
        return text
    keep = max(limit - len(_cut_marker(total, total, limit).encode()), 0)  # the longest marker: cut <= total
    while keep > 0 and (data[keep] & 0xC0) == 0x80:  # do not split a multi-byte character
        keep -= 1
    head = data[:keep].decode("utf-8", "surrogatepass")
    return head + _cut_marker(total - keep, total, limit)


def cap_output_tokens(
    text: str, max_tokens: int, count_tokens: Callable[[str], int], total_bytes: int | None = None
) -> str:
    """``text`` cut to at most ``max_tokens`` tokens as ``count_tokens`` counts them, marker included.

    On top of :func:`cap_output` when the backend counts tokens (a byte cap assumes a token per byte). The
    longest head that fits is found by bisection and followed by :func:`cap_output`'s marker, its limit in
    tokens; ``total_bytes``: the whole response's size when ``text`` is already a head of it.
    """
    if count_tokens(text) <= max_tokens and total_bytes is None:
        return text
    total = len(text.encode("utf-8", "surrogatepass")) if total_bytes is None else total_bytes

    def with_marker(k: int) -> str:
        head = text[:k]
        return head + _cut_marker(
            total - len(head.encode("utf-8", "surrogatepass")), total, max_tokens, "tokens"
        )

    return with_marker(longest_fitting(len(text), lambda k: count_tokens(with_marker(k)) <= max_tokens))


# ------------------------------------------------------------------------------------------------ images


@dataclasses.dataclass(frozen=True, slots=True)
class ToolImage:
    """One image of a tool result: the bytes and the declared MIME type (the real format is read before showing)."""

    data: bytes = dataclasses.field(repr=False)  # megabytes: not in reprs, logs or test reports
    mime_type: str

    def __post_init__(self) -> None:
        """Raises ``TypeError`` for ``data`` that is not ``bytes`` (a PIL image, a path, base64 text)."""
        if not isinstance(self.data, bytes):
            raise TypeError(
                "ToolImage.data must be the image file's bytes (PNG, JPEG or WebP, e.g. Path(p).read_bytes()), "
                f"got {type(self.data).__name__}"
            )

    def note(self) -> str:
        """The one-line note that stands for the image in text: ``[image image/png, 70 bytes]``."""
        return f"[image {self.mime_type}, {len(self.data)} bytes]"


@dataclasses.dataclass(frozen=True, slots=True)
class ToolContent:
    """A tool result with images: ``text`` (may be empty) and ``images`` in order; backends that take no images
    get :meth:`as_text`."""

    text: str
    images: tuple[ToolImage, ...] = ()

    def as_text(self) -> str:
        """The text, then one note per image, joined by newlines (``a dot\\n[image image/png, 70 bytes]``)."""
        return "\n".join([*([self.text] if self.text else []), *(i.note() for i in self.images)])


@pydantic.dataclasses.dataclass(frozen=True, slots=True)
class ToolImageLimits:
    """What images of tool results a model is shown (``Agent(tool_images=...)``); one not shown is a note why.

    Attributes:
        max_bytes: the largest image file shown (default 5 MiB).
        max_images: images shown per tool response (default 8).
        vision_budget: soft tokens per image on the embedded backend (``None``: the checkpoint's default).
        max_soft_tokens: soft tokens one step's tool images may take, each at its vision budget. ``"auto"``: a
            quarter of the prompt on a backend that counts tokens and reports ``max_prompt_tokens``, else no
            limit; ``None``: no limit.

    Raises:
        pydantic.ValidationError (a ValueError): a limit below 1 or a vision budget outside the five.
    """

    max_bytes: Annotated[int, pydantic.Field(ge=1, strict=True)] = 5 * 1024 * 1024
    max_images: Annotated[int, pydantic.Field(ge=1, strict=True)] = 8
    vision_budget: Annotated[int, pydantic.Strict(), pydantic.AfterValidator(check_budget)] | None = None
    max_soft_tokens: Annotated[int, pydantic.Field(ge=1, strict=True)] | Literal["auto"] | None = "auto"

    def soft_token_budget(self, backend: Any) -> int | None:
        """Soft tokens one step's tool images may take on ``backend`` (``None``: no limit)."""
        if self.max_soft_tokens != "auto":
            return self.max_soft_tokens
        if not callable(getattr(backend, "count_tokens", None)):
            return None
        tokens = prompt_tokens(backend)
        return None if tokens is None else max(tokens // 4, 1)


def image_format(data: bytes) -> str | None:
    """The format Pillow reads from the bytes (``"PNG"``...), or ``None`` for an unreadable image (not decoded)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = im.format
            im.verify()
    except Exception:  # Pillow raises several types for unreadable or truncated files
        return None
    return fmt


class ToolImageShare:
    """Which images of one step's tool responses the model is shown (when the backend ``takes_images``), as
    content parts; the step's responses share ``limits.max_soft_tokens``."""

    def __init__(self, backend: Any, limits: ToolImageLimits) -> None:
        self.limits = limits
        self.shown = getattr(backend, "takes_images", False) is True
        self.tokens_total = limits.soft_token_budget(backend) if self.shown else None
        self.tokens_left = self.tokens_total

    def content(self, text: str, value: Any) -> str | list[dict[str, Any]]:
        """The content of a tool message: ``text`` (the capped response), or when ``value`` is a
        :class:`ToolContent` with images shown, a text part (with a line ``[agentkit: image K not shown: WHY]``
        per image not shown) and then one ``image_url`` part (a ``data:`` URL of its real format) per image shown.
        """
        if not self.shown or not isinstance(value, ToolContent) or not value.images:
            return text
        parts: list[dict[str, Any]] = []
        notes = ""
        for k, image in enumerate(value.images, 1):
            fmt, why = self._check(k, image)
            if why is not None:
                notes += f"\n[agentkit: image {k} not shown: {why}]"
                continue
            url = f"data:{ACCEPTED_FORMATS[fmt]};base64,{base64.b64encode(image.data).decode('ascii')}"
            part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
            if self.limits.vision_budget is not None:
                part["vision_budget"] = self.limits.vision_budget
            parts.append(part)
        return [{"type": "text", "text": text + notes}, *parts]

    def _check(self, k: int, image: ToolImage) -> tuple[str, str | None]:
        """``(format, None)`` for an image shown (its soft tokens taken from the share), else ``("", why)``."""
        lim = self.limits
        if k > lim.max_images:
            return (
                "",
                f"a tool response shows at most {lim.max_images} image{'s' if lim.max_images != 1 else ''}",
            )
        if len(image.data) > lim.max_bytes:
            return "", f"{len(image.data):,} bytes, over the {lim.max_bytes:,}-byte limit"
        fmt = image_format(image.data)
        if fmt is None:
            return "", f"its data (declared {image.mime_type}) is not a readable image"
        if fmt not in ACCEPTED_FORMATS:
            return "", f"it is {fmt} (declared {image.mime_type}); PNG, JPEG and WebP are shown"
        cost = lim.vision_budget or DEFAULT_VISION_BUDGET
        if self.tokens_left is not None:
            if cost > self.tokens_left:
                return "", (
                    f"its {cost} soft tokens exceed the {self.tokens_left} left of the {self.tokens_total} "
                    "this step's tool images may take"
                )
            self.tokens_left -= cost
        return fmt, None
