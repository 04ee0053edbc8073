"""The prompt's prefill apart from denoising: the encoder's one pass over a prompt (:func:`prefill_prompt`, which a
binder reads and :func:`model.runtime.generate` continues from) and a prefill's image inputs."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from model.checkpoint import hf_compat as hf
from model.heads.copy_head import CopyHead, CopyMemory


def image_inputs(
    model: Any,
    input_ids: torch.Tensor,
    pixel_values: torch.Tensor | None,
    image_position_ids: torch.Tensor | None,
    mm_token_type_ids: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """The prefill's image keyword arguments (empty without images), on ``input_ids``' device, pixels in the
    encoder's dtype; ``mm_token_type_ids`` derived from ``config.image_token_id`` when ``None``. Raises ValueError
    for ``pixel_values`` without ``image_position_ids``."""
    if pixel_values is None:
        return {}
    if image_position_ids is None:
        raise ValueError("pixel_values needs image_position_ids (from the image processor)")
    if mm_token_type_ids is None:
        image_id = int(getattr(model.config, "image_token_id", -1))
        mm_token_type_ids = (input_ids == image_id).long()
    device = input_ids.device
    return {
        "pixel_values": pixel_values.to(device=device, dtype=model.model.encoder.dtype),
        "image_position_ids": image_position_ids.to(device),
        "mm_token_type_ids": mm_token_type_ids.to(device),
    }


@dataclass
class Prefill:
    """The prompt's prefill, computed before a turn's constraint so a binder can read it and :func:`generate` does
    not encode the prompt again.

    Attributes:
        cache: the KV cache holding the ``P`` prompt positions.
        hidden: ``[1, P, H]`` the encoder's final states over the prompt.
        memory: the copy head's memory of the prompt (``None``: no copy head).
        seconds: wall time of the encoder pass."""

    cache: Any
    hidden: torch.Tensor
    memory: CopyMemory | None
    seconds: float

    def draft(
        self, model: Any, tokenizer: Any, opening: str, until: re.Pattern[str], passes: int = 12
    ) -> str:
        """What ``model`` writes after ``opening`` with no constraint, read cheaply: a canvas of ``opening`` then
        uniform noise (seed 0) over this prefill's KV cache (read, not extended); each ``[1, C]`` decoder pass
        commits the argmax of the next position until ``until`` stops matching the whole text (its match is
        returned) or ``passes`` positions are written."""
        prompt, length = int(self.hidden.shape[1]), int(model.config.canvas_length)
        start = tokenizer.encode(opening, add_special_tokens=False)
        noise = torch.Generator().manual_seed(0)
        canvas = torch.randint(0, int(model.config.text_config.vocab_size), (1, length), generator=noise)
        canvas[0, : len(start)] = torch.tensor(start)
        canvas = canvas.to(model.device)
        seen = torch.ones((1, prompt + length), dtype=torch.bool, device=model.device)
        inputs = {
            "cache": self.cache,
            "decoder_attention_mask": hf.decoder_mask(model, canvas, self.cache, seen),
            "decoder_position_ids": torch.arange(
                prompt, prompt + length, dtype=torch.int32, device=model.device
            )[None],
        } | ({} if self.memory is None else {"copy_memory": self.memory})
        text = ""
        with torch.no_grad():
            for pos in range(len(start), min(len(start) + passes, length)):
                canvas[0, pos] = model(decoder_input_ids=canvas, **inputs).logits[0, pos].argmax()
                text = tokenizer.decode(canvas[0, len(start) : pos + 1].tolist(), skip_special_tokens=False)
                if (found := until.match(text)) is None or found.group() != text:
                    return "" if found is None else found.group()
        return text

    def check_covers(self, prompt_tokens: int) -> None:
        """ValueError unless this prefill is one row of ``prompt_tokens`` positions."""
        shape = tuple(self.hidden.shape)
        if len(shape) != 3 or shape[0] != 1 or shape[1] != prompt_tokens:
            raise ValueError(
                f"prefill= covers a prompt of {shape[1] if len(shape) == 3 else '?'} tokens (hidden states of "
                f"shape {shape}, expected [1, P, H]) but input_ids has {prompt_tokens} tokens: a prefill is for "
                "the prompt it was computed from"
            )


def prefill_prompt(model: Any, input_ids: torch.Tensor) -> Prefill:
    """One encoder pass over a ``[1, P]`` int64 prompt without images: the :class:`Prefill` that :func:`generate`
    (``prefill=``) continues from, token-identical to its own prefill. ValueError for another shape."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"prefill_prompt takes one row [1, P], got shape {tuple(input_ids.shape)}")
    t0 = time.perf_counter()
    length = int(input_ids.shape[1])
    attn = torch.ones((1, length), dtype=torch.bool, device=input_ids.device)
    pos = torch.arange(0, length, dtype=torch.int32, device=input_ids.device).unsqueeze(0)
    with torch.no_grad():
        enc_in, out = hf.encode(
            model,
            input_ids,
            attn,
            pos,
            hf.new_cache(model, 1, length),
            is_prefill=True,
            canvas_length=int(model.config.canvas_length),
        )
        head = getattr(model, "copy_head", None)
        memory = head.new_memory(enc_in, out.last_hidden_state, attn) if isinstance(head, CopyHead) else None
    return Prefill(out.cache, out.last_hidden_state, memory, time.perf_counter() - t0)
