"""llguidance tokenizers for Hugging Face tokenizers, built once per tokenizer object and cached.

Building an ``llguidance.LLTokenizer`` costs 12 ms (2k vocabulary) to 1.4 s (262k): never rebuild it per call.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
#: (id(tokenizer), n_vocab) -> (tokenizer, LLTokenizer). Holding the tokenizer keeps its id from being reused.
_CACHE: dict[tuple[int, int | None], tuple[Any, Any]] = {}
_MAX_ENTRIES = 16


def llg_tokenizer(hf_tokenizer: Any, n_vocab: int | None = None) -> Any:
    """The ``llguidance.LLTokenizer`` for ``hf_tokenizer`` (cached per tokenizer object and ``n_vocab``).

    Args:
        hf_tokenizer: a ``transformers.PreTrainedTokenizerFast`` (control tokens such as ``<|"|>`` must be
            registered as added tokens so grammars can name them).
        n_vocab: vocabulary size of the model's logits when larger than the tokenizer's (padded embedding
            tables); ``None`` uses the tokenizer's.

    Returns:
        ``llguidance.LLTokenizer`` built with ``llguidance.hf.from_tokenizer`` (EOS = the tokenizer's). At most
        16 tokenizers are kept; the oldest entry is dropped first.

    Raises:
        ValueError: ``hf_tokenizer`` is not a fast tokenizer (llguidance needs the Rust tokenizer JSON).
    """
    import llguidance.hf

    key = (id(hf_tokenizer), n_vocab)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is hf_tokenizer:
            return hit[1]
    tok = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=n_vocab)
    with _LOCK:
        _CACHE[key] = (hf_tokenizer, tok)
        while len(_CACHE) > _MAX_ENTRIES:
            _CACHE.pop(next(iter(_CACHE)))
    return tok
