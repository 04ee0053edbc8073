"""Images as input: opening image files, vision token budgets, and the checkpoint's image processor.

DiffusionGemma reads images through its Gemma 4 vision tower. The prompt holds one ``<|image|>`` token per
image where the chat template places the image; :meth:`VisionProcessor.expand` turns each into
``<|image>`` + ``n`` x ``<|image|>`` + ``<image|>`` (the soft-token placeholders the encoder overwrites with
the vision tower's output), exactly as transformers' ``Gemma4Processor.replace_image_token`` writes it, and
``n`` is what the checkpoint's image processor computes for the image and the budget.

The budget (``max_soft_tokens`` of transformers' ``Gemma4ImageProcessor``) is one of
:data:`VISION_BUDGETS`: 70 (classification, video frames), 140 (general understanding), 280 (the default: OCR
and documents), 560 (fine text), 1120 (complex analysis). The image is resized, keeping its aspect ratio, to the
largest size whose ``patch_size`` patches, pooled ``pooling_kernel_size``\\ :sup:`2` to one soft token, fit the
budget: an image of ``48 h`` x ``48 w`` pixels with ``h * w`` equal to the budget (336x480 for 70, 480x672
for 140, 672x960 for 280, 960x1344 for 560, 1344x1920 for 1120, height x width) uses exactly the budget; any
other size uses at most the budget (patch 16 and pooling 3 as in Gemma 4).

Pixels are processed by the checkpoint's own image processor class (``AutoImageProcessor``: the torchvision
backend where torchvision is installed, else the Pillow one). ``Gemma4Processor`` itself is not used: it also
builds a video processor, which imports torchvision, a several-GB CUDA build on CPU machines.

Sources: transformers ``models/gemma4/processing_gemma4.py`` and ``image_processing_gemma4.py``;
``models/diffusion_gemma/generation_diffusion_gemma.py`` (the first encoder call consumes ``pixel_values``,
``image_position_ids`` and ``mm_token_type_ids``).
"""

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

#: What an image can be given as: a file path, the file's bytes, a ``data:image/...;base64,`` URL, or a
#: ``PIL.Image.Image``.
ImageSource = str | Path | bytes | Any


class ImageError(ValueError):
    """An image cannot be used; the one-line message names the image (file, data URL or object) and why."""


def check_budget(budget: Any) -> int:
    """``budget`` as an int if it is one of :data:`VISION_BUDGETS`.

    Raises:
        ImageError: any other value (the message lists the five budgets).
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget not in VISION_BUDGETS:
        raise ImageError(
            f"vision budget {budget!r} is not supported: use one of {', '.join(map(str, VISION_BUDGETS))} "
            "soft tokens per image"
        )
    return int(budget)


def describe(source: ImageSource) -> str:
    """A short name of an image source for messages: the path, ``data URL (image/png, 1234 bytes)``, ..."""
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


def read_image_bytes(source: ImageSource) -> tuple[bytes | None, Any]:
    """The encoded bytes of ``source`` (``None`` for a ``PIL.Image.Image``, returned as the second item).

    Raises:
        ImageError: a missing or unreadable file, a remote URL (agentkit never fetches one: download it and
            pass the file), a malformed data URL, or an object that is not an image.
    """
    from PIL import Image

    if isinstance(source, Image.Image):
        return None, source
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), None
    if isinstance(source, str) and source.startswith("data:"):
        return _data_url_bytes(source), None
    if isinstance(source, str) and source.startswith(("http://", "https://")):
        raise ImageError(
            f"{source}: remote image URLs are not fetched (the embedded runtime works offline); download the "
            "image and pass the file"
        )
    if isinstance(source, str) and source.startswith("file://"):
        source = source[len("file://") :]
    if not isinstance(source, (str, Path)):
        raise ImageError(
            f"{describe(source)}: not an image (give a file path, bytes, a data URL or a PIL.Image.Image)"
        )
    path = Path(source)
    try:
        return path.read_bytes(), None
    except FileNotFoundError:
        raise ImageError(f"{path}: no such image file") from None
    except IsADirectoryError:
        raise ImageError(f"{path}: is a directory, not an image file") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read the image file ({exc.strerror or exc})") from None


def open_image(source: ImageSource) -> Any:
    """Open an image, checked and upright.

    The file must be PNG, JPEG or WebP and decode completely; its EXIF orientation is applied
    (``PIL.ImageOps.exif_transpose``: a phone photo stored sideways with an orientation tag comes out upright).

    Args:
        source: a file path (``str``, ``Path`` or ``file://`` URL), the file's bytes, a ``data:`` URL, or a
            ``PIL.Image.Image`` (any mode; it is only transposed).

    Returns:
        A loaded ``PIL.Image.Image``.

    Raises:
        ImageError: see :func:`read_image_bytes`; a file that is not an image, is corrupt or truncated, or is in
            another format (the message names the format and the accepted ones).
    """
    data, image = read_image_bytes(source)
    name = describe(source)
    return _upright(image if image is not None else _decode(data or b"", name), name)


def _decode(data: bytes, name: str) -> Any:
    """An accepted image file's bytes opened and fully decoded (``PIL.Image.Image`` with its ``format``).

    Raises:
        ImageError: not an image, another format, or corrupt or truncated data.
    """
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
    """``image`` with its EXIF orientation applied. Raises :class:`ImageError` for unreadable EXIF data."""
    from PIL import ImageOps

    try:
        upright = ImageOps.exif_transpose(image)
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"{name}: unreadable EXIF orientation ({exc})") from None
    return upright if upright is not None else image


def to_data_url(source: ImageSource) -> str:
    """A ``data:image/...;base64,`` URL holding ``source``, checked with :func:`open_image` first.

    A file's or bytes' own encoding is kept (EXIF included; orientation is applied when the image is
    processed); a ``PIL.Image.Image`` is written as PNG after its EXIF orientation is applied. A data URL is
    returned as is once checked.

    Raises:
        ImageError: see :func:`open_image`.
    """
    data, image = read_image_bytes(source)
    name = describe(source)
    if data is not None:  # the file's own bytes, read once; checked and kept as they are
        decoded = _decode(data, name)
        _upright(decoded, name)
        if isinstance(source, str) and source.startswith("data:"):
            return source
        return f"data:{ACCEPTED_FORMATS[str(decoded.format)]};base64,{base64.b64encode(data).decode('ascii')}"
    image = _upright(image, name)
    if image.mode not in _PNG_MODES:  # CMYK, YCbCr, ...
        image = image.convert("RGB")
    buf = io.BytesIO()
    try:
        image.save(buf, format="PNG")
    except (OSError, ValueError) as exc:
        raise ImageError(f"{name}: cannot be encoded as PNG ({exc})") from None
    return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def check_images(sources: Any, budget: int | None = None) -> None:
    """Check a vision budget (when given) and that each image opens, before any model loads (the CLI's check).

    Raises:
        ImageError: the first unusable image or the budget (see :func:`open_image`, :func:`check_budget`).
    """
    if budget is not None:
        check_budget(budget)
    for source in sources or ():
        open_image(source)


@dataclass
class VisionInputs:
    """Processed images for one prompt.

    Attributes:
        pixel_values: ``[N, max_patches, 3 * patch_size**2]`` float32 patches (``max_patches`` =
            ``max(budgets) * pooling_kernel_size**2``; padding patches beyond an image's own are zero).
        image_position_ids: ``[N, max_patches, 2]`` int64 (x, y) patch positions; ``(-1, -1)`` marks padding.
        soft_tokens: soft tokens per image (``<|image|>`` placeholders each takes in the prompt), in order.
        budgets: the vision budget of each image (its soft tokens are at most this).
    """

    pixel_values: torch.Tensor
    image_position_ids: torch.Tensor
    soft_tokens: list[int]
    budgets: list[int]

    def generate_kwargs(self) -> dict[str, Any]:
        """``pixel_values`` and ``image_position_ids`` as :func:`model.runtime.generate` takes them."""
        return {"pixel_values": self.pixel_values, "image_position_ids": self.image_position_ids}


class VisionProcessor:
    """A checkpoint's image processor and image token ids.

    Args:
        image_processor: transformers' ``Gemma4ImageProcessor`` / ``Gemma4ImageProcessorPil`` (or any image
            processor taking ``max_soft_tokens`` and returning ``pixel_values``, ``image_position_ids`` and
            ``num_soft_tokens_per_image``).
        image_token_id, boi_token_id, eoi_token_id: ids of ``<|image|>``, ``<|image>``, ``<image|>``.
        source: the checkpoint's name, for messages.
        max_side: the most patches along one side the vision tower has position embeddings for
            (``vision_config.position_embedding_size``); ``None``: unchecked.
    """

    def __init__(
        self,
        image_processor: Any,
        image_token_id: int,
        boi_token_id: int,
        eoi_token_id: int,
        source: str = "checkpoint",
        max_side: int | None = None,
    ) -> None:
        self.max_side = max_side
        self.image_processor = image_processor
        self.image_token_id = int(image_token_id)
        self.boi_token_id = int(boi_token_id)
        self.eoi_token_id = int(eoi_token_id)
        self.source = source

    @property
    def default_budget(self) -> int:
        """The checkpoint's own ``max_soft_tokens`` (280 unless its processor config says otherwise)."""
        return int(getattr(self.image_processor, "max_soft_tokens", DEFAULT_VISION_BUDGET))

    def process(
        self,
        images: list[Any],
        budgets: int | list[int | None] | None = None,
        names: list[str] | None = None,
    ) -> VisionInputs:
        """Pixels and soft-token counts of ``images`` (opened with :func:`open_image`).

        Args:
            images: ``PIL.Image.Image`` objects, in prompt order.
            budgets: one vision budget for all images, or one per image; ``None`` (or a ``None`` entry): the
                checkpoint's default. Images of different budgets share one batch: the smaller ones are padded
                with ``(-1, -1)`` patches, which the vision tower drops (their soft tokens are unchanged).
            names: how an error names each image (``image 1 of the latest user message``); default
                ``image K``, K its position in ``images``.

        Raises:
            ImageError: a budget outside :data:`VISION_BUDGETS`, or an image the processor refuses (too
                thin to resize, for instance), naming the image.
        """
        per = budgets if isinstance(budgets, list) else [budgets] * len(images)
        if len(per) != len(images):
            raise ImageError(f"{len(per)} vision budgets for {len(images)} images")
        import torch

        chosen = [check_budget(self.default_budget if b is None else b) for b in per]
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
            pixels.append(out["pixel_values"].float())
            positions.append(grid)
            counts.append(int(out["num_soft_tokens_per_image"][0]))
        if not pixels:
            raise ImageError("no images to process")
        width = max(p.shape[1] for p in pixels)
        for k, (pv, pos) in enumerate(zip(pixels, positions, strict=True)):
            if pv.shape[1] < width:
                pixels[k] = torch.nn.functional.pad(pv, (0, 0, 0, width - pv.shape[1]))
                positions[k] = torch.nn.functional.pad(pos, (0, 0, 0, width - pos.shape[1]), value=-1)
        return VisionInputs(torch.cat(pixels), torch.cat(positions), counts, chosen)

    def expand(self, input_ids: list[int], soft_tokens: list[int]) -> list[int]:
        """Replace the i-th ``<|image|>`` id of ``input_ids`` by ``<|image>`` + ``soft_tokens[i]`` x
        ``<|image|>`` + ``<image|>``.

        Raises:
            ImageError: the prompt holds another number of ``<|image|>`` tokens than there are images (a chat
                template that does not render image content parts).
        """
        found = sum(1 for i in input_ids if i == self.image_token_id)
        if found != len(soft_tokens):
            raise ImageError(
                f"the chat template of {self.source} placed {found} image token(s) for {len(soft_tokens)} "
                "image(s): it must render each image content part as <|image|>"
            )
        out: list[int] = []
        k = 0
        for i in input_ids:
            if i == self.image_token_id:
                out.append(self.boi_token_id)
                out.extend([self.image_token_id] * soft_tokens[k])
                out.append(self.eoi_token_id)
                k += 1
            else:
                out.append(i)
        return out


_LOCK = threading.Lock()


def vision_processor(checkpoint: Any) -> VisionProcessor:
    """The :class:`VisionProcessor` of a loaded checkpoint (built once, kept on the checkpoint object).

    Args:
        checkpoint: a :class:`model.checkpoint.loading.LoadedCheckpoint`.

    Raises:
        ImageError: the checkpoint has no vision tower, no image token ids, or no image processor config
            (``preprocessor_config.json`` or ``processor_config.json``) in its folder.
    """
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
        ids = {}
        for name, attr, fallback in (
            ("image", "image_token_id", "<|image|>"),
            ("boi", "boi_token_id", "<|image>"),
            ("eoi", "eoi_token_id", "<image|>"),
        ):
            value = getattr(config, attr, None)
            if value is None:
                value = tok.convert_tokens_to_ids(fallback)
            if value is None or value == tok.unk_token_id or not 0 <= int(value) < len(tok):
                raise ImageError(f"checkpoint {source} has no {fallback} token: it cannot read images")
            ids[name] = int(value)
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
        vp = VisionProcessor(
            processor,
            ids["image"],
            ids["boi"],
            ids["eoi"],
            source=source,
            max_side=None if side is None else int(side),
        )
        checkpoint._vision = vp
        return vp


def image_parts(messages: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The image content parts of ``messages`` in prompt order, as ``(message index, part)``.

    An image part is OpenAI's ``{"type": "image_url", "image_url": {"url": ...}}`` (a ``data:`` URL or a
    local file path) or transformers' ``{"type": "image", "image": ...}`` (``url`` / ``path`` also read).
    """
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                    out.append((i, part))
    return out


def image_names(messages: list[dict[str, Any]], where: list[int]) -> list[str]:
    """Names of images found in ``messages`` (``where``: each one's message index, as :func:`image_parts`
    gives them) that a user can tell apart: numbered within their message, the latest user message named as
    such (the one just sent, in a chat), others as ``user message N`` counting that role's messages only, so
    a system prompt put in front does not shift the number."""
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
    """The image a content part holds (see :func:`image_parts`).

    Raises:
        ImageError: the part holds no image (names the keys it has).
    """
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
        messages: OpenAI-style messages; image parts as :func:`image_parts` reads them.
        vision_budget: budget of image parts that carry no ``vision_budget`` of their own (``None``: the
            checkpoint's default).

    Returns:
        ``(messages, vision)``: the messages with each image part replaced by ``{"type": "image"}`` (the shape
        every Hugging Face chat template renders as its image token), and the processed images (``None`` and
        the messages unchanged when there are none).

    Raises:
        ImageError: see :func:`vision_processor`, :func:`open_image` and :func:`check_budget`.
    """
    found = image_parts(messages)
    if not found:
        if vision_budget is not None:
            check_budget(vision_budget)
        return messages, None
    vp = vision_processor(checkpoint)
    default = None if vision_budget is None else check_budget(vision_budget)
    images, budgets = [], []
    for _, part in found:
        images.append(open_image(part_source(part)))
        own = part.get("vision_budget")  # an agentkit image part's own budget
        budgets.append(default if own is None else check_budget(own))
    vision = vp.process(images, budgets, image_names(messages, [i for i, _ in found]))
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = [
                {"type": "image"} if isinstance(p, dict) and p.get("type") in ("image", "image_url") else p
                for p in c
            ]
            m = {**m, "content": c}
        out.append(m)
    return out, vision


#: File holding a checkpoint's processor config (transformers' layout: the image processor's settings nested
#: under ``image_processor``).
PROCESSOR_CONFIG = "processor_config.json"


def write_processor_config(folder: str | Path, config: Any) -> Path:
    """Write the image processor config that lets a checkpoint's images be processed offline (the default
    vision budget :data:`DEFAULT_VISION_BUDGET`).

    Args:
        folder: the checkpoint folder.
        config: the checkpoint's ``DiffusionGemmaConfig`` (``vision_config.patch_size`` and
            ``pooling_kernel_size`` are read from it).

    Returns:
        The written ``processor_config.json``.

    Raises:
        ImageError: the config has no vision tower.
    """
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
