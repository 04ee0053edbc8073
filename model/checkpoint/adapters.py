"""LoRA adapters on a DiffusionGemma checkpoint: which layers they adapt, the base they belong to, loading.

An adapter folder (``agentkit specialize``) holds peft's files and :data:`ADAPTER_INFO`, which names the base and
its fingerprint (:func:`base_fingerprint`); :func:`apply_adapter` refuses one trained on another base. The LoRA
layers stay unmerged: the encoder and decoder share their weight tensors, so merging a decoder adapter would change
the encoder too, which training never saw (``tests/test_specialize.py`` checks the encoder is untouched). Source: Hu
et al. 2021, "LoRA"; implementation: Hugging Face ``peft``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from model.errors import CheckpointError

#: agentkit's record beside peft's files: ``{"base", "base_fingerprint", "bundle", "tools", "lora_rank"}``.
ADAPTER_INFO = "agentkit_adapter.json"

#: The modules LoRA adapts (peft's ``target_modules``): the decoder's attention and MLP projections and the copy
#: head's. The encoder stays frozen, so training builds no graph over the long prompt (2.4 s a step against 12.6).
LORA_TARGETS = (
    r"model\.decoder\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    r"|copy_head\.(key_proj|query_proj|decl_proj|ctrl)"
)

#: Bytes of each weight file read for the fingerprint, at its middle and at its end (besides its header).
_SAMPLE = 1 << 20


class AdapterError(CheckpointError):
    """An adapter cannot be used; the message names the adapter folder and the problem."""


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """Hide the ``is_gradient_checkpointing`` FutureWarning peft raises when it wraps a model."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def base_fingerprint(folder: str | Path) -> str:
    """A sha256 hex fingerprint of a checkpoint's weights: ``config.json`` and, per safetensors file, its size,
    header and 1 MiB samples at its middle and end (cheap on a 50 GB checkpoint). Raises :class:`AdapterError` for a
    folder without ``config.json`` or weights."""
    root = Path(folder)
    config = root / "config.json"
    weights = sorted(root.glob("*.safetensors"))
    if not config.is_file() or not weights:
        raise AdapterError(f"{root}: not a checkpoint folder (config.json and *.safetensors needed)")
    h = hashlib.sha256()
    h.update(json.dumps(json.loads(config.read_text(encoding="utf-8")), sort_keys=True).encode())
    for w in weights:
        size = w.stat().st_size
        h.update(f"{w.name}:{size}".encode())
        with w.open("rb") as f:
            n = int.from_bytes(f.read(8), "little")
            h.update(f.read(min(n, size)))
            for at in (size // 2, max(0, size - _SAMPLE)):
                f.seek(at)
                h.update(f.read(_SAMPLE))
    return h.hexdigest()


def read_adapter_info(adapter: str | Path) -> dict[str, Any]:
    """The :data:`ADAPTER_INFO` record of an adapter folder.

    Raises:
        AdapterError: no such folder, no ``adapter_config.json`` or ``adapter_model.safetensors``, or a missing or
            malformed :data:`ADAPTER_INFO`."""
    root = Path(adapter)
    if root.is_file():
        raise AdapterError(f"adapter {root}: is a file; give the adapter's folder")
    if not root.is_dir():
        raise AdapterError(f"adapter {root}: no such folder")
    if not (root / "adapter_config.json").is_file():
        raise AdapterError(f"adapter {root}: no adapter_config.json (not a LoRA adapter folder)")
    if not (root / "adapter_model.safetensors").is_file():
        raise AdapterError(
            f"adapter {root}: no adapter_model.safetensors (the adapter's weights are missing)"
        )
    info_file = root / ADAPTER_INFO
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(
            f"adapter {root}: no {ADAPTER_INFO} (it records the base checkpoint; write adapters with "
            "agentkit specialize)"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise AdapterError(f"adapter {root}: unreadable {ADAPTER_INFO} ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("base_fingerprint"), str):
        raise AdapterError(f"adapter {root}: {ADAPTER_INFO} has no base_fingerprint")
    return info


def apply_adapter(model: Any, base_folder: str | Path, adapter: str | Path) -> Any:
    """Load a LoRA adapter onto ``model`` (loaded from ``base_folder``, whose fingerprint is checked); returns the
    same model, LoRA layers injected into the decoder and copy head (not merged), in eval mode.

    Raises:
        AdapterError: see :func:`read_adapter_info`; an adapter trained on another base (both named); peft refusing
            the weights."""
    info = read_adapter_info(adapter)
    have = base_fingerprint(base_folder)
    if info["base_fingerprint"] != have:
        raise AdapterError(
            f"adapter {adapter} was trained on base {info.get('base', '?')} (fingerprint "
            f"{info['base_fingerprint'][:12]}), not on {base_folder} (fingerprint {have[:12]}): load it with "
            f"that base (--model)"
        )
    from peft import PeftModel

    try:
        with quiet_peft():
            wrapped = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AdapterError(f"adapter {adapter}: cannot be loaded onto {base_folder} ({first})") from None
    inner: Any = wrapped.base_model.model  # the same model object, LoRA layers injected (not merged)
    inner.eval()
    return inner
