"""Byte-level BPE tokenizers with Gemma 4 control tokens, for the project's own checkpoints.

``build_tokenizer`` trains a byte-level BPE (``tokenizers`` library) whose first ids are the fixed
:data:`model.special_tokens.SPECIAL_TOKENS`, and wraps it in a ``transformers.PreTrainedTokenizerFast`` that
carries the Gemma 4 chat template (``model/chat_template.jinja``). Control tokens are *never* stripped by
``decode`` in this project: stripping them deletes ``<|tool_call>`` and ``<|"|>`` and loses tool calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model import special_tokens as st

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")


def chat_template() -> str:
    """Return the Gemma 4-format Jinja chat template shipped with the project's checkpoints.

    Raises:
        FileNotFoundError: if ``model/chat_template.jinja`` is missing from the installation.
    """
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def build_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2, *, space_tokens: bool = False
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and return a ``PreTrainedTokenizerFast``.

    Args:
        texts: training corpus (any iterable of strings; a few MB train in about a second).
        vocab_size: total vocabulary size including the 18 special tokens and the 256 byte tokens.
        min_frequency: minimum pair count for a BPE merge.
        space_tokens: split runs of spaces into their own pre-tokens before the byte-level split, so a word
            has the same token ids after a space (in a request) as after ``<|"|>`` (in a tool call): copying a
            value from the request becomes an identity copy, which a small model learns far sooner than the
            GPT-2 ``Ġword`` -> ``word`` mapping. Costs about one token per space.

    Returns:
        ``transformers.PreTrainedTokenizerFast`` with ``pad/eos/bos/unk`` set, the Gemma 4 control tokens as
        single special tokens at ids ``0..17`` (see :mod:`model.special_tokens`) and ``chat_template`` set.

    Raises:
        ValueError: if ``vocab_size`` is too small to hold the special and byte tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < len(st.SPECIAL_TOKENS) + 256 + 1:
        raise ValueError(f"vocab_size={vocab_size} is too small: need > {len(st.SPECIAL_TOKENS) + 256}")
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if space_tokens:
        from tokenizers import Regex

        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(" +"), behavior="isolated"), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(st.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for i, name in enumerate(st.SPECIAL_TOKENS):
        got = tok.token_to_id(name)
        if got != i:  # pragma: no cover - guaranteed by the trainer's special_tokens order
            raise RuntimeError(f"special token {name!r} got id {got}, expected {i}")
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Any) -> Any:
    """Wrap a ``tokenizers.Tokenizer`` whose ids 0..17 are :data:`model.special_tokens.SPECIAL_TOKENS`.

    Returns:
        ``transformers.PreTrainedTokenizerFast`` with pad/eos/bos/unk, the control tokens as special tokens and
        the Gemma 4 chat template.
    """
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=st.PAD,
        eos_token=st.EOS,
        bos_token=st.BOS,
        unk_token=st.UNK,
        additional_special_tokens=list(st.SPECIAL_TOKENS[4:]),
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chat_template()
    return fast
