"""What a tool returns, as the model sees it, and where a sync tool runs.

:func:`serialize_result` turns a return value into the tool response text (``str`` as is, ``bytes`` decoded as
UTF-8, Pydantic models and dataclasses as their JSON); :func:`cap_output` / :func:`cap_output_tokens` cut it to
a budget in bytes or tokens with a marker saying how much was cut. :func:`run_sync_in_thread` runs a sync tool
on a daemon worker thread, so a tool that hangs cannot block the planner or keep the process alive.

A tool may return a :class:`ToolContent` (text plus images; an MCP tool whose result holds images does). Its
text, with a one-line note per image, is the tool response every backend gets; on a backend that takes images
(``takes_images``), :class:`ToolImageShare` turns it into content parts: the text, then one ``data:`` URL
``image_url`` part per image shown, within the :class:`ToolImageLimits` of the agent.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextvars
import dataclasses
import functools
import io
import queue
import threading
from collections.abc import Callable
from typing import Any, Literal

import pydantic
import pydantic_core

from model.heads.vision import ACCEPTED_FORMATS, DEFAULT_VISION_BUDGET, check_budget

# ---------------------------------------------------------------------------------------------- threads


class _DaemonThreadPool:
    """A growable pool of daemon threads for sync tools.

    Unlike :class:`concurrent.futures.ThreadPoolExecutor`, its threads are daemons and are not joined at
    interpreter exit, so a tool that hangs past its timeout cannot keep the process alive. A new thread is
    started whenever every existing one is busy (a hung tool holds its thread), up to ``max_workers``.
    """

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


def tool_thread_limit() -> int:
    """The most daemon threads sync tools run on at once (a call that finds them all busy waits for one)."""
    return _POOL.max_workers


def run_sync_in_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """Schedule ``fn(*args, **kwargs)`` on agentkit's daemon tool threads; await the returned future.

    The current :mod:`contextvars` context is copied into the thread (as :func:`asyncio.to_thread` does).
    Must be called from a running event loop.
    """
    ctx = contextvars.copy_context()
    return asyncio.wrap_future(_POOL.submit(functools.partial(ctx.run, fn, *args, **kwargs)))


# -------------------------------------------------------------------------------------------------- Tool


#: Line appended to a tool response whose bytes were not valid UTF-8 (``{n}``: invalid byte sequences replaced).
INVALID_UTF8_NOTE = (
    "[agentkit: the tool output was not valid UTF-8; {n} invalid byte sequence(s) replaced with U+FFFD]"
)
_REPLACEMENT_UTF8 = "\ufffd".encode()


def decode_utf8(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    """Decode bytes as UTF-8, replacing each invalid byte sequence with U+FFFD.

    Returns:
        ``(text, n)``: the text and the number of invalid sequences replaced (0 for valid UTF-8).
    """
    raw = bytes(data)
    text = raw.decode("utf-8", errors="replace")
    return text, text.count("\ufffd") - raw.count(_REPLACEMENT_UTF8)


def _decode_nested_bytes(value: Any) -> tuple[Any, int]:
    """``value`` with bytes inside dicts, lists, tuples, sets, Pydantic models and dataclasses decoded by
    :func:`decode_utf8`; returns the new value and the number of invalid sequences replaced."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return decode_utf8(value)
    if isinstance(value, pydantic.BaseModel):
        return _decode_nested_bytes(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _decode_nested_bytes(dataclasses.asdict(value))
    if isinstance(value, dict):
        out, bad = {}, 0
        for k, v in value.items():
            k2, n1 = _decode_nested_bytes(k)
            v2, n2 = _decode_nested_bytes(v)
            out[k2] = v2
            bad += n1 + n2
        return out, bad
    if isinstance(value, (list, tuple, set, frozenset)):
        pairs = [_decode_nested_bytes(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    return value, 0


def serialize_result(value: Any) -> str:
    """Turn a tool's return value into the text of the tool response.

    ``str`` is sent as is; a :class:`ToolContent` as its text with a note per image (:meth:`ToolContent.as_text`);
    ``bytes`` are decoded as UTF-8 text; Pydantic models as their JSON; anything else (dicts, lists, numbers,
    ``None``, dataclasses, datetimes...) as JSON via ``pydantic_core.to_json``, with ``tolist()`` for arrays
    (numpy, torch) and ``str()`` for other unknown types. NaN and infinities, which JSON has no numbers for,
    become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (a Pydantic model follows its config:
    ``null`` by default). Bytes that are not valid UTF-8 (at the top or nested) are decoded with U+FFFD in place
    of each invalid sequence, and the text ends with a line :data:`INVALID_UTF8_NOTE` saying how many were
    replaced: the output reaches the model instead of failing the call.
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
        fixed, bad = _decode_nested_bytes(value)
        if not bad:
            raise
    return (
        pydantic_core.to_json(fixed, fallback=_json_fallback, inf_nan_mode="strings").decode()
        + "\n"
        + INVALID_UTF8_NOTE.format(n=bad)
    )


def _json_fallback(value: Any) -> Any:
    """A value JSON has no type for: its ``tolist()`` when it has one (numpy arrays and scalars, torch tensors,
    ``array.array``, pandas series: all their values, where ``str()`` of a numpy array of over 1,000 items
    elides the middle with ``...``), else ``str()``."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return tolist()
        except Exception:  # a tolist that needs arguments or fails: the text, as for any other type
            pass
    return str(value)


def _cut_marker(cut: int, total: int, limit: int) -> str:
    return f"\n[agentkit: cut {cut:,} of {total:,} bytes of this tool output (limit {limit:,} bytes)]"


def cap_output(text: str, limit: int | None) -> str:
    """Cut a tool response to at most ``limit`` bytes of UTF-8, a marker saying how much was cut included.

    The head is kept, cut on a character boundary, and followed by one line
    ``[agentkit: cut N of M bytes of this tool output (limit L bytes)]`` (under 100 bytes; when ``limit`` is
    smaller than the marker, the marker alone is returned). Bytes, not characters, because a byte never
    becomes more than one token with byte-fallback tokenizers (Gemma's), so a byte limit is also a token
    limit whatever the script.

    Args:
        text: the tool response.
        limit: the most bytes returned (>= 0); ``None`` keeps everything.

    Returns:
        ``text`` itself when it fits, else the cut text ending with the marker.
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
    """Cut a tool response to at most ``max_tokens`` tokens of the model that reads it, marker included.

    Used on top of :func:`cap_output` when the backend can count its tokens (the embedded backend): a byte cap
    that must hold for any text has to assume one token per byte, which cuts ordinary JSON (2.5-4 bytes per
    token) to a third of what fits. The head is kept (the longest prefix that fits, found by bisection over
    characters, O(log n) tokenizer calls) and followed by the marker of :func:`cap_output`, whose limit is
    given in tokens: ``[agentkit: cut N of M bytes of this tool output (limit L tokens)]``.

    Args:
        text: the tool response (already byte-capped).
        max_tokens: the most tokens returned (>= 1).
        count_tokens: the model's token count of a text.
        total_bytes: size of the whole response when ``text`` is already a head of it (for the marker).

    Returns:
        ``text`` itself when it fits, else the cut text ending with the marker.
    """
    if count_tokens(text) <= max_tokens and total_bytes is None:
        return text
    total = len(text.encode("utf-8", "surrogatepass")) if total_bytes is None else total_bytes

    def with_marker(k: int) -> str:
        head = text[:k]
        cut = total - len(head.encode("utf-8", "surrogatepass"))
        return (
            head
            + f"\n[agentkit: cut {cut:,} of {total:,} bytes of this tool output (limit {max_tokens:,} tokens)]"
        )

    lo, hi = 0, len(text)
    while lo < hi:  # largest k with count_tokens(with_marker(k)) <= max_tokens
        mid = (lo + hi + 1) // 2
        if count_tokens(with_marker(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return with_marker(lo)


# ------------------------------------------------------------------------------------------------ images

#: Image formats shown to a model (Pillow's format names) and their MIME types: PNG, JPEG, WebP (those the
#: embedded vision path reads).
SHOWN_FORMATS: dict[str, str] = dict(ACCEPTED_FORMATS)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolImage:
    """One image of a tool result: the file's bytes and the MIME type the tool declared (not trusted: the real
    format is read from the bytes before the image is shown)."""

    data: bytes = dataclasses.field(repr=False)  # megabytes: not in reprs, logs or test reports
    mime_type: str

    def note(self) -> str:
        """The one-line note that stands for the image in text: ``[image image/png, 70 bytes]``."""
        return f"[image {self.mime_type}, {len(self.data)} bytes]"


@dataclasses.dataclass(frozen=True, slots=True)
class ToolContent:
    """A tool result with images: ``text`` (may be empty) and ``images`` in the order the tool gave them.

    Return one from a tool to show it images (MCP tools whose results hold images do). Backends that take no
    images get :meth:`as_text`.
    """

    text: str
    images: tuple[ToolImage, ...] = ()

    def as_text(self) -> str:
        """The text, then one note per image, joined by newlines (``a dot\\n[image image/png, 70 bytes]``)."""
        return "\n".join([*([self.text] if self.text else []), *(i.note() for i in self.images)])


@dataclasses.dataclass(frozen=True, slots=True)
class ToolImageLimits:
    """What images of tool results a model is shown (``Agent(tool_images=...)``); an image not shown stays a
    note saying why.

    Attributes:
        max_bytes: the largest image file shown (bytes; default 5 MiB).
        max_images: images shown per tool response (default 8); later ones are notes.
        vision_budget: soft tokens per image on the embedded backend (one of ``model.heads.vision.VISION_BUDGETS``);
            ``None``: the checkpoint's default (280).
        max_soft_tokens: soft tokens the images of one step's tool responses may take in the prompt, each
            image counted at its vision budget (the most it takes). ``"auto"``: on a backend that counts tokens
            and reports ``max_prompt_tokens`` (the embedded one), half the tool-output share, i.e. a quarter of
            the prompt (448 for ``agentkit-tiny``); elsewhere no limit. ``None``: no limit.

    Raises:
        ValueError: a limit below 1 or a vision budget outside the five.
    """

    max_bytes: int = 5 * 1024 * 1024
    max_images: int = 8
    vision_budget: int | None = None
    max_soft_tokens: int | Literal["auto"] | None = "auto"

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_images"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ToolImageLimits.{name} must be an integer >= 1, got {v!r}")
        m = self.max_soft_tokens
        if m not in (None, "auto") and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(
                f"ToolImageLimits.max_soft_tokens must be an integer >= 1, 'auto' or None, got {m!r}"
            )
        if self.vision_budget is not None:
            check_budget(self.vision_budget)

    def soft_token_budget(self, backend: Any) -> int | None:
        """Soft tokens one step's tool images may take on ``backend`` (see ``max_soft_tokens``); ``None``: no
        limit."""
        if self.max_soft_tokens != "auto":
            return self.max_soft_tokens
        if not callable(getattr(backend, "count_tokens", None)):
            return None
        try:
            tokens = getattr(backend, "max_prompt_tokens", None)
        except Exception:  # a backend that cannot tell
            return None
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            return max(tokens // 4, 1)
        return None


def image_format(data: bytes) -> str | None:
    """The format of an image file as Pillow reads it from the bytes (``"PNG"``, ``"GIF"``...), or ``None`` when
    the bytes are not a readable image (the file is opened and verified, not decoded)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = im.format
            im.verify()
    except Exception:  # Pillow raises several types for unreadable or truncated files
        return None
    return fmt


class ToolImageShare:
    """The images of one step's tool responses: which the model is shown, as content parts.

    Made per step by the planner (``Planner.resolve``); the step's responses share ``limits.max_soft_tokens``.

    Args:
        backend: the agent's backend; images are shown when its ``takes_images`` is true.
        limits: the agent's :class:`ToolImageLimits`.
    """

    def __init__(self, backend: Any, limits: ToolImageLimits) -> None:
        self.limits = limits
        self.shown = getattr(backend, "takes_images", False) is True
        self.tokens_total = limits.soft_token_budget(backend) if self.shown else None
        self.tokens_left = self.tokens_total

    def content(self, text: str, value: Any) -> str | list[dict[str, Any]]:
        """The content of a tool message.

        Args:
            text: the tool response text (serialised and capped; for a :class:`ToolContent` its notes included).
            value: the tool's return value (``None`` for an error).

        Returns:
            ``text`` when the backend takes no images or ``value`` is not a :class:`ToolContent` with images;
            else content parts: ``{"type": "text", "text": ...}`` (``text`` and a line
            ``[agentkit: image K not shown: WHY]`` per image not shown), then per image shown
            ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` (MIME type of its real
            format; ``vision_budget`` added when the limits set one).
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
            url = f"data:{SHOWN_FORMATS[fmt]};base64,{base64.b64encode(image.data).decode('ascii')}"
            part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
            if self.limits.vision_budget is not None:
                part["vision_budget"] = self.limits.vision_budget
            parts.append(part)
        return [{"type": "text", "text": text + notes}, *parts]

    def _check(self, k: int, image: ToolImage) -> tuple[str, str | None]:
        """``(format, None)`` for an image shown (its soft tokens taken from the step's share), else
        ``("", why)``."""
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
        if fmt not in SHOWN_FORMATS:
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
