"""Loading DiffusionGemma-architecture checkpoints (the embedded default, a local folder, or a cached hub id) and
LoRA adapters on them. A ``copy_head`` entry in ``config.json`` selects
:class:`model.heads.copy_model.DiffusionGemmaWithCopyHead`. An adapter folder (``agentkit specialize``) holds peft's
files and :data:`ADAPTER_INFO`, which names the base and its fingerprint (:func:`base_fingerprint`). Every failure is
a :class:`CheckpointError` naming the path and the problem, found before any network access."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants, snapshot_download
from huggingface_hub.file_download import repo_folder_name
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoTokenizer, DiffusionGemmaForBlockDiffusion
from transformers.utils import logging as hf_logging

from grammar import special_tokens as st
from model.errors import CheckpointError, invalid_entry
from model.runtime.settings import DenoiseSettings

#: The embedded default checkpoint, trained by the project (``model/training``).
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "agentkit-tiny"
SUPPORTED_MODEL_TYPES = ("diffusion_gemma",)
#: The devices a checkpoint loads on (as the bundle schema's `model.device`).
_DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


#: Decoding options transformers' generation config has no field for (:class:`DenoiseSettings`; missing keys
#: keep their defaults).
DECODING_FILE = "agentkit_decoding.json"


class _DecodingOptions(BaseModel):
    """The keys of :data:`DECODING_FILE` (strict JSON types)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    accept_window: int | None = Field(default=None, ge=1)
    no_repeat: bool = False
    extend_prose: bool = True
    call_accept_window: int | None = Field(default=None, ge=1)
    repeat_window: int = Field(default=1, ge=1)
    bind_values: bool = False
    ground_answers: bool = False
    span_copy: bool = False

    @model_validator(mode="after")
    def _widens_no_repeat(self) -> _DecodingOptions:
        if self.repeat_window > 1 and not self.no_repeat:
            raise ValueError(
                f'repeat_window {self.repeat_window} needs "no_repeat": true (the rule it widens)'
            )
        return self


DECODING_KEYS = tuple(_DecodingOptions.model_fields)


@dataclass
class LoadedCheckpoint:
    """A loaded checkpoint.

    Attributes:
        model: ``transformers.DiffusionGemmaForBlockDiffusion`` in eval mode.
        tokenizer: the checkpoint's ``PreTrainedTokenizerFast``.
        settings: :class:`DenoiseSettings` from its ``generation_config.json`` and :data:`DECODING_FILE`.
        source: the folder or hub id it came from.
        adapter: the LoRA adapter folder applied, or ``None``."""

    model: Any
    tokenizer: Any
    settings: DenoiseSettings
    source: str
    adapter: str | None = None


def _check_local_folder(folder: Path) -> None:
    if not folder.exists():
        default = folder == DEFAULT_CHECKPOINT
        hint = " (the embedded default checkpoint is missing: train it with `agentkit train` or reinstall)"
        raise CheckpointError(f"{folder}: checkpoint folder does not exist{hint if default else ''}")
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder")
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise CheckpointError(f"{folder}: no config.json, not a transformers checkpoint folder")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{cfg_path}: invalid JSON ({exc})") from exc
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"{cfg_path}: model_type {model_type!r} is not a DiffusionGemma architecture "
            f"(expected one of {SUPPORTED_MODEL_TYPES}, architectures={cfg.get('architectures')})"
        )
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(f"{folder}: no *.safetensors weights")
    for shard in shards:  # a truncated file or corrupt header, found before transformers reads it
        try:
            with safe_open(shard, "pt"):
                pass
        except SafetensorError as exc:
            raise CheckpointError(f"{shard}: truncated or corrupt safetensors file ({exc})") from None


def _cached_snapshot(repo_id: str) -> str:
    """``repo_id``'s complete snapshot in the local HF cache, else CheckpointError (no network)."""

    try:
        return str(snapshot_download(repo_id, local_files_only=True))
    except OSError:  # LocalEntryNotFoundError, IncompleteSnapshotError
        pass
    except ValueError as exc:  # HFValidationError
        raise CheckpointError(f"{repo_id!r} is neither a local folder nor a valid hub id ({exc})") from None
    folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    state = "has no complete snapshot" if folder.exists() else "does not exist"
    offline = ", offline mode is on (HF_HUB_OFFLINE)" if constants.HF_HUB_OFFLINE else ""
    raise CheckpointError(
        f"{repo_id}: not in the local Hugging Face cache ({folder} {state}{offline}); fetch it first with "
        f"`hf download {repo_id}` (agentkit never downloads a checkpoint by itself), or pass a local folder"
    )


def _resolve_source(path_or_id: str | os.PathLike[str] | None) -> str:
    """The checkpoint's local folder, checked before any weights load."""
    source = DEFAULT_CHECKPOINT if path_or_id is None else path_or_id
    src = str(source)
    local = Path(src).expanduser()
    is_local = local.exists() or path_or_id is None or src.startswith((".", "/", "~")) or src.count("/") != 1
    if is_local:
        _check_local_folder(local)
        return str(local)
    src = _cached_snapshot(src)
    _check_local_folder(Path(src))
    return src


@contextlib.contextmanager
def _held_load_report() -> Iterator[list[logging.LogRecord]]:
    """Hold back transformers' LOAD REPORT log records (re-emitted when the load goes on)."""
    logger = logging.getLogger("transformers.modeling_utils")
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        held.append(record)
        return False

    logger.addFilter(hold)
    try:
        yield held
    finally:
        logger.removeFilter(hold)


def _from_pretrained(src: str, dtype: torch.dtype) -> tuple[Any, Any]:
    """The model (with a copy head when declared) and its tokenizer, or CheckpointError."""

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        config = AutoConfig.from_pretrained(src, local_files_only=True)
        cls: Any = DiffusionGemmaForBlockDiffusion
        if isinstance(getattr(config, "copy_head", None), dict):
            from model.heads.copy_model import DiffusionGemmaWithCopyHead

            cls = DiffusionGemmaWithCopyHead
        with _held_load_report() as held:
            model, info = cls.from_pretrained(
                src, config=config, output_loading_info=True, dtype=dtype, local_files_only=True
            )
        lost = sorted(k for k in info.get("missing_keys", ()) if k.startswith("copy_head."))
        if lost:  # transformers would leave them uninitialised: a copy head of garbage
            raise CheckpointError(
                f"{src}: model.safetensors lacks {', '.join(lost)}, which the copy_head entry of config.json needs"
            )
        # saved by a copy head with other settings (e.g. spaced_word_starts deleted from config.json)
        extra = sorted(k for k in info.get("unexpected_keys", ()) if k.startswith("copy_head."))
        if extra:
            raise CheckpointError(
                f"{src}: model.safetensors holds {', '.join(extra)}, which the copy_head entry of config.json does "
                "not declare (an entry edited after training?)"
            )
        for record in held:  # any other key transformers reports, logged as it would have been
            logging.getLogger(record.name).handle(record)
        tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
        _check_response_ids(src, model, tokenizer)
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointError(f"{src}: cannot load checkpoint ({exc})") from exc
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(
            f"{src}: checkpoint does not match the DiffusionGemma architecture ({exc})"
        ) from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return model, tokenizer


def _check_response_ids(src: str, model: Any, tokenizer: Any) -> None:
    """CheckpointError when ``answer_match_responses`` are not the tool-response ids."""
    head = getattr(model, "copy_head", None)
    ids = getattr(getattr(head, "cfg", None), "answer_match_responses", None)
    if ids is None:
        return
    want = [st.TOOL_RESPONSE_START, st.TOOL_RESPONSE_END]
    got = [tokenizer.convert_ids_to_tokens(i) if i < len(tokenizer) else None for i in ids]
    if got != want:
        raise CheckpointError(
            f"{src}: config.json copy_head.answer_match_responses {json.dumps(ids)} must be the ids of "
            f"{json.dumps(want)} in this tokenizer, not of {json.dumps(got)}"
        )


def load_checkpoint(
    path_or_id: str | os.PathLike[str] | None = None,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    adapter: str | os.PathLike[str] | None = None,
) -> LoadedCheckpoint:
    """Load a DiffusionGemma checkpoint and its tokenizer and denoising settings.

    Args:
        path_or_id: local folder, hub id (read from the local Hugging Face cache only: ``hf download ID`` fetches
            it), or ``None`` for the embedded default.
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        adapter: a LoRA adapter folder written by ``agentkit specialize``, applied after loading; ``None``: none.

    Raises:
        CheckpointError: missing folder, wrong architecture, truncated weights, a hub id not cached, an unsupported
            dtype or device, a CUDA device torch does not see; ``AdapterError`` (a subclass) for an adapter that is
            missing, malformed or trained on another base."""
    if dtype not in _DTYPES:
        raise CheckpointError(f"unsupported dtype {dtype!r}: choose one of {sorted(_DTYPES)}")
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise CheckpointError(f"unsupported device {device!r}: choose 'cpu', 'cuda' or 'cuda:N'")
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.startswith("cuda") and int(device.partition(":")[2] or 0) >= seen:
        raise CheckpointError(f"device {device!r} requested but torch sees {seen} CUDA device(s)")
    src = _resolve_source(path_or_id)
    if adapter is not None:  # a missing or malformed adapter fails before the weights load
        read_adapter_info(Path(adapter))

    model, tokenizer = _from_pretrained(src, _DTYPES[dtype])
    if adapter is not None:
        model = apply_adapter(model, src, Path(adapter))
    model.to(device)  # in place for nn.Module
    model.eval()
    settings = DenoiseSettings.from_model(model)
    extra = Path(src) / DECODING_FILE
    if extra.exists():  # a folder or unreadable entry there is an error, not a silent default
        settings = settings.replace(**read_decoding_file(extra))
    return LoadedCheckpoint(
        model=model,
        tokenizer=tokenizer,
        settings=settings,
        source=src,
        adapter=None if adapter is None else str(adapter),
    )


def read_decoding_file(path: Path) -> dict[str, Any]:
    """The decoding options of a checkpoint's :data:`DECODING_FILE`.

    Raises:
        CheckpointError: an unreadable file or not a JSON object, an unknown key, a bad value, or
            ``repeat_window`` > 1 without ``no_repeat`` (names the file and the key)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read decoding options ({exc})") from exc
    try:
        return _DecodingOptions.model_validate(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise CheckpointError(invalid_entry(str(path), exc, DECODING_KEYS)) from None


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
        AdapterError: no such folder, no ``adapter_config.json`` or ``adapter_model.safetensors``, a malformed
            ``adapter_config.json``, or a missing or malformed :data:`ADAPTER_INFO`."""
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
    try:
        json.loads((root / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: malformed JSON or not UTF-8
        raise AdapterError(f"adapter {root}: unreadable adapter_config.json ({exc})") from None
    info_file = root / ADAPTER_INFO
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(
            f"adapter {root}: no {ADAPTER_INFO} (it records the base checkpoint; write adapters with "
            "agentkit specialize)"
        ) from None
    except (OSError, ValueError) as exc:
        raise AdapterError(f"adapter {root}: unreadable {ADAPTER_INFO} ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("base_fingerprint"), str):
        raise AdapterError(f"adapter {root}: {ADAPTER_INFO} has no base_fingerprint")
    return info


def apply_adapter(model: Any, base_folder: str | Path, adapter: str | Path) -> Any:
    """Load a LoRA adapter onto ``model`` (loaded from ``base_folder``, whose fingerprint is checked); returns the
    same model, LoRA layers injected into the decoder and copy head, in eval mode. They stay unmerged: the encoder
    and decoder share their weight tensors, so merging would change the encoder too, which training never saw
    (``tests/test_specialize.py`` checks it is untouched). Source: Hu et al. 2021, "LoRA"; implementation: ``peft``.

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
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
        # torch's load_state_dict heads its details with "Error(s) in loading state_dict for X:"
        first = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        raise AdapterError(f"adapter {adapter}: cannot be loaded onto {base_folder} ({first})") from None
    inner: Any = wrapped.base_model.model  # the same model object, LoRA layers injected (not merged)
    inner.eval()
    return inner
