"""Byte-level BPE tokenizers with Gemma 4 control tokens, and encoding text as text.

:func:`build_tokenizer` trains a byte-level BPE whose first ids are :data:`grammar.special_tokens.SPECIAL_TOKENS`,
wrapped in a ``PreTrainedTokenizerFast`` carrying the Gemma 4 chat template. Control tokens are never stripped by
``decode`` here (that would delete ``<|tool_call>`` and ``<|"|>``), and text is never encoded as one: control ids
appear only where the template or the grammar places them."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grammar import special_tokens as st

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

CHAT_TEMPLATE_PATH = Path(__file__).resolve().parent.parent / "chat_template.jinja"


def chat_template() -> str:
    """The Gemma 4-format Jinja chat template shipped with the project's checkpoints."""
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def build_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2, *, space_tokens: bool = False
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts``; returns :func:`wrap_tokenizer`'s tokenizer.

    Args:
        texts: training corpus (a few MB train in about a second).
        vocab_size: total vocabulary including the 18 special and the 256 byte tokens.
        min_frequency: minimum pair count for a BPE merge.
        space_tokens: split runs of spaces into their own pre-tokens, so a word has the same ids after a space as
            after ``<|"|>``: copying a value becomes an identity copy, which a small model learns far sooner (about
            one token more per space).

    Raises:
        ValueError: ``vocab_size`` too small to hold the special and byte tokens."""
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
    tok.train_from_iterator(texts, trainer=trainer)  # special_tokens take ids 0.. in order
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Any) -> Any:
    """A ``PreTrainedTokenizerFast`` over ``tok`` (ids 0..17 the special tokens) with pad/eos/bos/unk, the control
    tokens special, Gemma 4's image token names and the chat template."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=st.PAD,
        eos_token=st.EOS,
        bos_token=st.BOS,
        unk_token=st.UNK,
        additional_special_tokens=list(st.SPECIAL_TOKENS[4:]),
        clean_up_tokenization_spaces=False,
        image_token=st.IMAGE_TOKEN,
        boi_token=st.IMAGE_START,
        eoi_token=st.IMAGE_END,
    )
    fast.chat_template = chat_template()
    return fast


@dataclass(frozen=True)
class _Controls:
    """Per-tokenizer tables of :func:`encode_marked` / :func:`decode_marked`."""

    ids: dict[str, int]  # control token text -> id
    id_set: frozenset[int]
    structural: re.Pattern[str]  # control tokens of st.CONTROL_SHAPE, longest first, as a group
    text_tok: Any  # tokenizers.Tokenizer copy with encode_special_tokens=True


def control_tokens(tokenizer: Any) -> dict[str, int]:
    """The control tokens of ``tokenizer``, text -> id: the added tokens marked special plus those named in
    :data:`grammar.special_tokens.SPECIAL_TOKENS` (whitespace-only tokens excepted). No input text ever encodes to
    one of these ids."""
    return dict(_controls(tokenizer).ids)


@functools.lru_cache(maxsize=16)
def _controls(tokenizer: Any) -> _Controls:
    from tokenizers import Tokenizer

    protocol = set(st.SPECIAL_TOKENS)
    ids = {
        t.content: int(i)
        for i, t in tokenizer.added_tokens_decoder.items()
        if (t.special or t.content in protocol) and t.content.strip()
    }
    shaped = sorted((c for c in ids if re.fullmatch(st.CONTROL_SHAPE, c)), key=len, reverse=True)
    structural = re.compile(f"({'|'.join(map(re.escape, shaped))})" if shaped else "(?!)")
    text_tok = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    text_tok.no_padding()
    text_tok.no_truncation()
    text_tok.encode_special_tokens = True
    return _Controls(ids, frozenset(ids.values()), structural, text_tok)


def _escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as the text ``\\udXXX``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _encode_texts(ctl: _Controls, texts: list[str]) -> list[list[int]]:
    """Ordinary-token ids of each text; never a control id."""
    texts = [_escape_surrogates(t) for t in texts]
    out = [list(e.ids) for e in ctl.text_tok.encode_batch(texts, add_special_tokens=False)]
    tok = ctl.text_tok
    for k, ids in enumerate(out):
        if ctl.id_set.isdisjoint(ids):
            continue
        # the BPE rebuilt a control token from plain text: split the pre-tokens that still give one
        norm = tok.normalizer.normalize_str(texts[k]) if tok.normalizer is not None else texts[k]
        pieces = (
            [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(norm)]
            if tok.pre_tokenizer is not None
            else [norm]
        )
        out[k] = [i for piece in pieces for i in _tokenize_piece(ctl, piece)]
    return out


def _tokenize_piece(ctl: _Controls, piece: str) -> list[int]:
    ids = [t.id for t in ctl.text_tok.model.tokenize(piece)]
    if ctl.id_set.isdisjoint(ids):
        return ids
    if len(piece) < 2:
        raise ValueError(
            f"the tokenizer has no ordinary token for the text {piece!r}: it maps it to a control token"
        )
    half = len(piece) // 2
    return _tokenize_piece(ctl, piece[:half]) + _tokenize_piece(ctl, piece[half:])


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Encode ``text`` as ordinary text tokens, even where its characters spell a control token.

    The tokenizer's pipeline runs with special-token matching off (``split_special_tokens``); a pre-token the BPE
    still merges into a control token (``<|`` + ``"|>``) is split. Lone surrogates are written as ``\\udXXX``.
    Returns ids (no BOS/EOS) that decode to ``text``.

    Raises:
        ValueError: the vocabulary cannot spell a character except as a control token."""
    return _encode_texts(_controls(tokenizer), [text])[0]


def encode_marked(tokenizer: Any, marked: str) -> list[int]:
    """Encode a marked string (:func:`grammar.special_tokens.mark_text`): control tokens written literally become
    their ids, everything else ordinary text tokens (no BOS/EOS). Without marks this equals ``tokenizer(marked,
    add_special_tokens=False)`` when the control tokens have :data:`grammar.special_tokens.CONTROL_SHAPE`."""
    ctl = _controls(tokenizer)
    parts = ctl.structural.split(marked)  # text, control, text, ..., text
    encoded = _encode_texts(ctl, [st.unmark_text(x) for x in parts[::2]])
    ids = encoded[0]
    for control, text_ids in zip(parts[1::2], encoded[1:], strict=True):
        ids += [ctl.ids[control], *text_ids]
    return ids


def decode_marked(tokenizer: Any, ids: Iterable[int]) -> str:
    """Decode ``ids`` to a marked string: control tokens as their text, ordinary tokens' text marked, so
    :func:`grammar.parse.parse_tool_calls` tells the token ``<|"|>`` from the text ``<|"|>`` in a value.
    ``unmark_text`` of the result equals ``tokenizer.decode(ids, skip_special_tokens=False)``."""
    names = {i: c for c, i in _controls(tokenizer).ids.items()}
    out: list[str] = []
    for control, run in itertools.groupby(map(int, ids), names.__contains__):
        if control:
            out += [names[i] for i in run]
        else:
            out.append(st.mark_text(str(tokenizer.decode(list(run), skip_special_tokens=False))))
    return "".join(out)


def _mark_inputs(obj: Any) -> Any:
    """Copy of messages/tools with every string (dict keys included) marked."""
    if isinstance(obj, str):
        return st.mark_all_text(obj)
    if isinstance(obj, dict):
        return {(st.mark_all_text(k) if isinstance(k, str) else k): _mark_inputs(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_mark_inputs(v) for v in obj]
    return obj


def render_marked(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """Render a chat with the tokenizer's chat template, every input string marked, ending with the model-turn
    opener: only the template's control tokens appear literally; ``unmark_text`` of it is the plain rendering."""
    return str(
        tokenizer.apply_chat_template(
            _mark_inputs(messages),
            tools=_mark_inputs(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
    )


def encode_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """Token ids of a chat (``<bos>`` written by the template, ending with the model-turn opener): the template's
    control tokens as ids, all input text as text tokens, so a tool result holding ``<turn|><|turn>user`` cannot
    open a turn. Without control-token spellings the ids equal the plain rendering's tokenization. transformers'
    ``sanitize_control_tokens`` is not used: it leaves dict keys unsanitized and refuses vocabularies whose BPE
    rebuilds ``<|"|>`` from plain text."""
    return encode_marked(tokenizer, render_marked(tokenizer, messages, tools))
