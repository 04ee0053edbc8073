"""Images as input: opening image files, vision token budgets, and the checkpoint's image processor.

The prompt holds one ``<|image|>`` per image where the chat template places it; :meth:`VisionProcessor.expand` turns
each into ``<|image>`` + ``n`` x ``<|image|>`` + ``<image|>`` (placeholders the encoder overwrites with the vision
tower's output), as transformers' ``Gemma4Processor.replace_image_token`` does, ``n`` being what the image processor
computes for the image and budget. The budget (``max_soft_tokens``) is one of :data:`VISION_BUDGETS`: 70
(classification), 140 (general), 280 (default: OCR and documents), 560 (fine text), 1120 (complex analysis); an
image is resized, keeping its aspect ratio, to the largest size whose pooled patches fit it.

Pixels go through the checkpoint's own image processor class (``AutoImageProcessor``), not ``Gemma4Processor``,
which also builds a video processor that imports torchvision. Sources: transformers
``models/gemma4/processing_gemma4.py``, ``image_processing_gemma4.py``."""

from __future__ import annotations

import base64
import binascii
import io
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where tensors are made: reading and checking images needs only Pillow
    import torch

#: The soft-token budgets per image that Gemma 4's image processor supports.
VISION_BUDGETS: tuple[int, ...] = (70, 140, 280, 560, 1120)
#: The budget used when none is given (OCR and documents).
DEFAULT_VISION_BUDGET = 280
#: Image modes a PNG file holds (others, e.g. CMYK, are converted to RGB before encoding).
_PNG_MODES = ("1", "L", "LA", "I", "P", "RGB", "RGBA")
#: Image file formats accepted (Pillow's format names) and their MIME types.
ACCEPTED_FORMATS: dict[str, str] = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}

#: A file path, the file's bytes, a ``data:image/...;base64,`` URL, or a ``PIL.Image.Image``.
ImageSource = str | Path | bytes | Any


class ImageError(ValueError):
    """An image cannot be used; the one-line message names the image and why. ``part``: ``(message index, content
    index)`` of the image part in the messages (set by :func:`prepare_images`), else ``None``."""

    part: tuple[int, int] | None = None


def check_budget(budget: Any) -> int:
    """``budget`` as an int if it is one of :data:`VISION_BUDGETS`, else :class:`ImageError`."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget not in VISION_BUDGETS:
        raise ImageError(
            f"vision budget {budget!r} is not supported: use one of {', '.join(map(str, VISION_BUDGETS))} "
            "soft tokens per image"
        )
    return int(budget)


def describe(source: ImageSource) -> str:
    """A short name of an image source for messages: the path, ``data URL (image/png, 1234 chars)``, ..."""
    if isinstance(source, Path):
        return str(source)
    if isinstance(source, str):
        if source.startswith("data:"):
            head = source[5:].split(",", 1)[0]
            return f"data URL ({head.split(';', 1)[0] or 'no type'}, {len(source)} chars)"
        return source
    if isinstance(source, (bytes, bytearray)):
        return f"image bytes ({len(source)} bytes)"
    return f"{type(source).__name__} object"


def _data_url_bytes(url: str) -> bytes:
    head, sep, payload = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        raise ImageError(f"{describe(url)}: not a base64 data URL (expected data:image/...;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"{describe(url)}: the base64 payload does not decode ({exc})") from exc


def _load(source: ImageSource) -> tuple[bytes | None, Any, str | None]:
    """``(bytes, image, mime)``: the encoded bytes of ``source`` (``None`` for a ``PIL.Image.Image``), the image
    checked and upright, the bytes' MIME type (:class:`ImageError` otherwise)."""
    from PIL import Image

    name = describe(source)
    if isinstance(source, Image.Image):
        return None, _upright(source, name), None
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif isinstance(source, str) and source.startswith("data:"):
        data = _data_url_bytes(source)
    elif isinstance(source, str) and source.startswith(("http://", "https://")):
        raise ImageError(
            f"{source}: remote image URLs are not fetched (the embedded runtime works offline); download the "
            "image and pass the file"
        )
    elif isinstance(source, (str, Path)):
        data = _read_file(Path(source.removeprefix("file://") if isinstance(source, str) else source))
    else:
        raise ImageError(f"{name}: not an image (give a file path, bytes, a data URL or a PIL.Image.Image)")
    image = _decode(data, name)
    return data, _upright(image, name), ACCEPTED_FORMATS[str(image.format)]


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ImageError(f"{path}: no such image file") from None
    except IsADirectoryError:
        raise ImageError(f"{path}: is a directory, not an image file") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read the image file ({exc.strerror or exc})") from None


def open_image(source: ImageSource) -> Any:
    """Open an image (a path, ``file://`` URL, bytes, ``data:`` URL or ``PIL.Image.Image``), checked and upright: a
    file must be PNG, JPEG or WebP and decode completely; its EXIF orientation is applied.

    Raises:
        ImageError: a missing or unreadable file, a remote URL (never fetched), a malformed data URL, an object that
            is not an image; not an image, corrupt, truncated or of another format."""
    return _load(source)[1]


def _decode(data: bytes, name: str) -> Any:
    """An accepted image file's bytes opened and fully decoded (:class:`ImageError` otherwise)."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ImageError(f"{name}: not a readable image (corrupt, or not an image file)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"{name}: not a readable image ({exc})") from None
    if image.format not in ACCEPTED_FORMATS:
        raise ImageError(f"{name}: unsupported image format {image.format} (accepted: PNG, JPEG, WebP)")
    try:
        image.load()
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"{name}: corrupt or truncated {image.format} image ({exc})") from None
    return image


def _upright(image: Any, name: str) -> Any:
    """``image`` with its EXIF orientation applied."""
    from PIL import ImageOps

    try:
        upright = ImageOps.exif_transpose(image)
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"{name}: unreadable EXIF orientation ({exc})") from None
    return upright if upright is not None else image


def to_data_url(source: ImageSource) -> str:
    """A ``data:image/...;base64,`` URL holding ``source``, checked with :func:`open_image` first. A file's own
    encoding is kept; a ``PIL.Image.Image`` is written as PNG, upright; a data URL is returned as is.

    Raises:
        ImageError: see :func:`open_image`."""
    data, image, mime = _load(source)
    if isinstance(source, str) and source.startswith("data:"):
        return source
    if data is None:  # a PIL image: written as PNG
        if image.mode not in _PNG_MODES:  # CMYK, YCbCr, ...
            image = image.convert("RGB")
        buf = io.BytesIO()
        try:
            image.save(buf, format="PNG")
        except (OSError, ValueError) as exc:
            raise ImageError(f"{describe(source)}: cannot be encoded as PNG ({exc})") from None
        data, mime = buf.getvalue(), "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def check_images(sources: Any, budget: int | None = None) -> None:
    """Check a vision budget (when given) and that each image opens (:class:`ImageError` on the first that does
    not)."""
    if budget is not None:
        check_budget(budget)
    for source in sources or ():
        open_image(source)


@dataclass
class VisionInputs:
    """Processed images for one prompt.

    Attributes:
        pixel_values: ``[N, max_patches, 3 * patch_size**2]`` float32 patches (padding patches zero).
        image_position_ids: ``[N, max_patches, 2]`` int64 (x, y) patch positions; ``(-1, -1)`` marks padding.
        soft_tokens: soft tokens per image, in order.
        budgets: the vision budget of each image."""

    pixel_values: torch.Tensor
    image_position_ids: torch.Tensor
    soft_tokens: list[int]
    budgets: list[int]

    def generate_kwargs(self) -> dict[str, Any]:
        """``pixel_values`` and ``image_position_ids`` as :func:`model.runtime.generate` takes them."""
        return {"pixel_values": self.pixel_values, "image_position_ids": self.image_position_ids}


@dataclass
class VisionProcessor:
    """A checkpoint's image processor and image token ids.

    Attributes:
        image_processor: transformers' ``Gemma4ImageProcessor`` (or any taking ``max_soft_tokens`` and returning
            ``pixel_values``, ``image_position_ids`` and ``num_soft_tokens_per_image``).
        image_token_id, boi_token_id, eoi_token_id: ids of ``<|image|>``, ``<|image>``, ``<image|>``.
        source: the checkpoint's name, for messages.
        max_side: the most patches along one side the vision tower has positions for; ``None``: unchecked."""

    image_processor: Any
    image_token_id: int
    boi_token_id: int
    eoi_token_id: int
    source: str = "checkpoint"
    max_side: int | None = None

    def process(
        self,
        images: list[Any],
        budgets: int | list[int | None] | None = None,
        names: list[str] | None = None,
    ) -> VisionInputs:
        """Pixels and soft-token counts of ``images`` (``PIL.Image.Image``, in prompt order).

        Args:
            images: the opened images.
            budgets: one vision budget for all, or one per image; ``None`` (entry): the checkpoint's default. Smaller
                images are padded with ``(-1, -1)`` patches, which the vision tower drops.
            names: how an error names each image; default ``image K``.

        Raises:
            ImageError: a budget outside :data:`VISION_BUDGETS`, or an image the processor refuses, naming it."""
        per = budgets if isinstance(budgets, list) else [budgets] * len(images)
        if len(per) != len(images):
            raise ImageError(f"{len(per)} vision budgets for {len(images)} images")
        import torch

        default = int(getattr(self.image_processor, "max_soft_tokens", DEFAULT_VISION_BUDGET))
        chosen = [check_budget(default if b is None else b) for b in per]
        names = names or [f"image {k + 1}" for k in range(len(images))]
        pixels, positions, counts = [], [], []
        for k, (image, budget) in enumerate(zip(images, chosen, strict=True)):
            rgb = image if image.mode == "RGB" else image.convert("RGB")
            try:
                out = self.image_processor(images=[rgb], max_soft_tokens=budget, return_tensors="pt")
            except ValueError as exc:
                raise ImageError(f"{names[k]} ({rgb.width}x{rgb.height} px): {exc}") from None
            grid = out["image_position_ids"].long()
            side = int(grid.max()) + 1
            if self.max_side is not None and side > self.max_side:
                raise ImageError(
                    f"{names[k]} ({rgb.width}x{rgb.height} px) at vision budget {budget} is {side} patches along "
                    f"one side; the vision tower of {self.source} has positions for {self.max_side}: use a smaller "
                    "budget or a less elongated image"
                )
            pixels.append(out["pixel_values"][0].float())
            positions.append(grid[0])
            counts.append(int(out["num_soft_tokens_per_image"][0]))
        if not pixels:
            raise ImageError("no images to process")
        pad = torch.nn.utils.rnn.pad_sequence
        return VisionInputs(pad(pixels, True), pad(positions, True, -1), counts, chosen)

    def expand(self, input_ids: list[int], soft_tokens: list[int]) -> list[int]:
        """Replace the i-th ``<|image|>`` id by ``<|image>`` + ``soft_tokens[i]`` x ``<|image|>`` + ``<image|>``.
        Raises :class:`ImageError` when the prompt holds another number of ``<|image|>`` than images."""
        found = sum(1 for i in input_ids if i == self.image_token_id)
        if found != len(soft_tokens):
            raise ImageError(
                f"the chat template of {self.source} placed {found} image token(s) for {len(soft_tokens)} "
                "image(s): it must render each image content part as <|image|>"
            )
        sizes, out = iter(soft_tokens), []
        for i in input_ids:
            image = i == self.image_token_id
            out.extend([self.boi_token_id, *[i] * next(sizes), self.eoi_token_id] if image else [i])
        return out


_LOCK = threading.Lock()


def vision_processor(checkpoint: Any) -> VisionProcessor:
    """The :class:`VisionProcessor` of a loaded checkpoint (built once, kept on it).

    Raises:
        ImageError: no vision tower, no image token ids, or no image processor config in the folder."""
    with _LOCK:
        cached = getattr(checkpoint, "_vision", None)
        if cached is not None:
            return cached
        source = str(checkpoint.source)
        model = checkpoint.model
        config = model.config
        encoder = getattr(getattr(model, "model", None), "encoder", None)
        if getattr(config, "vision_config", None) is None or getattr(encoder, "vision_tower", None) is None:
            raise ImageError(f"checkpoint {source} has no vision tower: it cannot read images")
        tok = checkpoint.tokenizer
        ids = []  # of <|image|>, <|image>, <image|>: the config's, else the tokenizer's
        for attr, fallback in (("image", "<|image|>"), ("boi", "<|image>"), ("eoi", "<image|>")):
            value = getattr(config, f"{attr}_token_id", None)
            value = tok.convert_tokens_to_ids(fallback) if value is None else value
            if value is None or value == tok.unk_token_id or not 0 <= int(value) < len(tok):
                raise ImageError(f"checkpoint {source} has no {fallback} token: it cannot read images")
            ids.append(int(value))
        try:
            from transformers import AutoImageProcessor

            processor = AutoImageProcessor.from_pretrained(source, local_files_only=True)
        except (OSError, ValueError, ImportError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ImageError(
                f"checkpoint {source} has no usable image processor config (preprocessor_config.json or "
                f"processor_config.json): {first}"
            ) from None
        side = getattr(config.vision_config, "position_embedding_size", None)
        image, boi, eoi = ids
        vp = VisionProcessor(processor, image, boi, eoi, source, None if side is None else int(side))
        checkpoint._vision = vp
        return vp


def image_names(messages: list[dict[str, Any]], where: list[int]) -> list[str]:
    """Names a user can tell apart for the images at message indices ``where``: numbered within their message, the
    latest user message named as such, others by their role's count (a system prompt does not shift it)."""
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
    latest_user = max((i for i, r in enumerate(roles) if r == "user"), default=-1)
    names: list[str] = []
    seen: dict[int, int] = {}
    for i in where:
        seen[i] = seen.get(i, 0) + 1
        if i == latest_user:
            names.append(f"image {seen[i]} of the latest user message")
        else:
            n = roles[: i + 1].count(roles[i])
            names.append(
                f"image {seen[i]} of {roles[i]} message {n}"
                if roles[i]
                else f"image {seen[i]} of message {i + 1}"
            )
    return names


def part_source(part: dict[str, Any]) -> ImageSource:
    """The image a content part holds (:class:`ImageError` when it holds none)."""
    if part.get("type") == "image_url":
        spec = part.get("image_url")
        url = spec.get("url") if isinstance(spec, dict) else spec
        if isinstance(url, str) and url:
            return url
        raise ImageError("an image_url content part needs image_url.url (a data: URL or a file path)")
    for key in ("image", "url", "path"):
        if part.get(key) is not None:
            return part[key]
    raise ImageError(f"an image content part holds no image (keys: {sorted(part)})")


def prepare_images(
    checkpoint: Any, messages: list[dict[str, Any]], vision_budget: int | None = None
) -> tuple[list[dict[str, Any]], VisionInputs | None]:
    """Open and process the image parts of ``messages`` for ``checkpoint``.

    Args:
        checkpoint: a :class:`model.checkpoint.loading.LoadedCheckpoint`.
        messages: OpenAI-style messages; image parts are OpenAI's ``image_url`` parts and transformers'
            ``{"type": "image", ...}``.
        vision_budget: budget of parts without their own ``vision_budget`` (``None``: the checkpoint's default).

    Returns:
        ``(messages, vision)``: each image part replaced by ``{"type": "image"}`` (what chat templates render as the
        image token), and the processed images (``None``, messages unchanged, when there are none).

    Raises:
        ImageError: see :func:`vision_processor`, :func:`open_image` and :func:`check_budget`."""
    default = None if vision_budget is None else check_budget(vision_budget)
    found: list[
        tuple[int, int, dict[str, Any]]
    ] = []  # (message index, part index, image part), in prompt order
    out = []
    for i, m in enumerate(messages):
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):
            image = [isinstance(p, dict) and p.get("type") in ("image_url", "image") for p in c]
            found += [(i, j, p) for j, (p, yes) in enumerate(zip(c, image, strict=True)) if yes]
            m = {**m, "content": [{"type": "image"} if yes else p for p, yes in zip(c, image, strict=True)]}
        out.append(m)
    if not found:
        return messages, None
    vp = vision_processor(checkpoint)
    images, budgets = [], []
    for i, j, part in found:
        try:
            images.append(open_image(part_source(part)))
            own = part.get("vision_budget")  # an agentkit image part's own budget
            budgets.append(default if own is None else check_budget(own))
        except ImageError as exc:
            exc.part = (i, j)
            raise
    return out, vp.process(images, budgets, image_names(messages, [i for i, _, _ in found]))


#: A checkpoint's processor config (transformers' layout).
PROCESSOR_CONFIG = "processor_config.json"


def write_processor_config(folder: str | Path, config: Any) -> Path:
    """Write ``processor_config.json`` into the checkpoint ``folder`` so its images are processed offline (patch and
    pooling sizes from ``config.vision_config``; budget :data:`DEFAULT_VISION_BUDGET`); returns its path. Raises
    :class:`ImageError` when the config has no vision tower."""
    vision = getattr(config, "vision_config", None)
    if vision is None:
        raise ImageError("the config has no vision_config: nothing to process images for")
    data = {
        "processor_class": "Gemma4Processor",
        "image_seq_length": DEFAULT_VISION_BUDGET,
        "image_processor": {
            "image_processor_type": "Gemma4ImageProcessor",
            "patch_size": int(vision.patch_size),
            "pooling_kernel_size": int(vision.pooling_kernel_size),
            "max_soft_tokens": DEFAULT_VISION_BUDGET,
            "do_convert_rgb": True,
            "do_resize": True,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": False,
            "image_mean": [0.0, 0.0, 0.0],
            "image_std": [1.0, 1.0, 1.0],
        },
    }
    out = Path(folder) / PROCESSOR_CONFIG
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out
