"""Byte-level BPE tokenizers with Gemma 4 control tokens, for the project's own checkpoints.

``build_tokenizer`` trains a byte-level BPE (``tokenizers`` library) whose first ids are the fixed
:data:`grammar.special_tokens.SPECIAL_TOKENS`, and wraps it in a ``transformers.PreTrainedTokenizerFast`` that
carries the Gemma 4 chat template (``model/chat_template.jinja``). Control tokens are *never* stripped by
``decode`` in this project: stripping them deletes ``<|tool_call>`` and ``<|"|>`` and loses tool calls.
"""

from __future__ import annotations

import functools
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
        single special tokens at ids ``0..17`` (see :mod:`grammar.special_tokens`) and ``chat_template`` set.

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
    """Wrap a ``tokenizers.Tokenizer`` whose ids 0..17 are :data:`grammar.special_tokens.SPECIAL_TOKENS`.

    Returns:
        ``transformers.PreTrainedTokenizerFast`` with pad/eos/bos/unk, the control tokens as special tokens,
        the image tokens named as Gemma 4's processor expects them (``image_token``, ``boi_token``,
        ``eoi_token``) and the Gemma 4 chat template.
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
        image_token=st.IMAGE_TOKEN,
        boi_token=st.IMAGE_START,
        eoi_token=st.IMAGE_END,
    )
    fast.chat_template = chat_template()
    return fast


# ----------------------------------------------------------------------------------------------------------
# Encoding text as text: control tokens only where the template or the grammar places them
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Controls:
    """Per-tokenizer tables of :func:`encode_marked` / :func:`decode_marked` (cached per tokenizer object)."""

    ids: dict[str, int]  # control token text -> id
    id_set: frozenset[int]
    structural: re.Pattern[str] | None  # control tokens of st.CONTROL_SHAPE, longest first
    text_tok: Any  # tokenizers.Tokenizer copy with encode_special_tokens=True


def control_tokens(tokenizer: Any) -> dict[str, int]:
    """The control tokens of ``tokenizer``: text -> id.

    Control tokens are the added tokens marked special, plus added tokens named in
    :data:`grammar.special_tokens.SPECIAL_TOKENS` (a checkpoint may register Gemma's protocol tokens as
    non-special added tokens); tokens made only of whitespace are not control tokens (templates write them as
    ordinary text). Text from users, tools, files and tool arguments never encodes to one of these ids.

    Args:
        tokenizer: a ``transformers.PreTrainedTokenizerFast``.
    """
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
    structural = re.compile("|".join(map(re.escape, shaped))) if shaped else None
    text_tok = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    text_tok.no_padding()
    text_tok.no_truncation()
    text_tok.encode_special_tokens = True
    return _Controls(ids, frozenset(ids.values()), structural, text_tok)


def _escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (unencodable in UTF-8) written as the text ``\\udXXX``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _encode_texts(ctl: _Controls, texts: list[str]) -> list[list[int]]:
    """Ordinary-token ids of each text; never a control id (see :func:`encode_text`)."""
    texts = [_escape_surrogates(t) for t in texts]
    out = [list(e.ids) for e in ctl.text_tok.encode_batch(texts, add_special_tokens=False)]
    for k, ids in enumerate(out):
        if ctl.id_set.isdisjoint(ids):
            continue
        # The BPE model itself spells a control token from plain text (its merges can rebuild `<|"|>` from
        # `<|` + `"|>`), or a non-special added token matched: encode each pre-token on its own and split the
        # ones that still give a control id.
        out[k] = _encode_pretokens(ctl, texts[k])
    return out


def _encode_pretokens(ctl: _Controls, text: str) -> list[int]:
    tok = ctl.text_tok
    norm = tok.normalizer.normalize_str(text) if tok.normalizer is not None else text
    pieces = (
        [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(norm)] if tok.pre_tokenizer is not None else [norm]
    )
    ids: list[int] = []
    for piece in pieces:
        ids.extend(_tokenize_piece(ctl, piece))
    return ids


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

    Uses the tokenizer's own pipeline with special-token matching off (``encode_special_tokens``, the
    ``split_special_tokens`` of ``transformers``). Where the BPE model would still rebuild a control token
    from plain text (a vocabulary trained on text holding the spellings merges ``<|`` + ``"|>`` into
    ``<|"|>``), that pre-token is split so that the ids spell the same text with ordinary tokens. Lone
    surrogates (unencodable in UTF-8) are written as the text ``\\udXXX``.

    Args:
        tokenizer: a ``transformers.PreTrainedTokenizerFast``.
        text: the text (unmarked).

    Returns:
        Token ids (no BOS/EOS added); none is in :func:`control_tokens`; decoding them gives ``text`` back.

    Raises:
        ValueError: the vocabulary cannot spell a single character except as a control token.
    """
    return _encode_texts(_controls(tokenizer), [text])[0]


def encode_marked(tokenizer: Any, marked: str) -> list[int]:
    """Encode a marked string (see :func:`grammar.special_tokens.mark_text`): control tokens written literally
    become their ids, everything else (marked text included) becomes ordinary text tokens.

    For a string without marks this gives the same ids as ``tokenizer(marked, add_special_tokens=False)``
    whenever its control tokens have the shape :data:`grammar.special_tokens.CONTROL_SHAPE` (all of Gemma's);
    control tokens of another shape are always encoded as text.

    Args:
        tokenizer: a ``transformers.PreTrainedTokenizerFast``.
        marked: e.g. a rendered chat from :func:`encode_chat`'s rendering, or
            :func:`grammar.parse.format_tool_call`'s output.

    Returns:
        Token ids (no BOS/EOS added).
    """
    ctl = _controls(tokenizer)
    layout: list[str | int] = []
    pos = 0
    if ctl.structural is not None:
        for m in ctl.structural.finditer(marked):
            if m.start() > pos:
                layout.append(marked[pos : m.start()])
            layout.append(ctl.ids[m.group()])
            pos = m.end()
    if pos < len(marked):
        layout.append(marked[pos:])
    texts = [st.unmark_text(x) for x in layout if isinstance(x, str)]
    encoded = iter(_encode_texts(ctl, texts))
    ids: list[int] = []
    for x in layout:
        if isinstance(x, int):
            ids.append(x)
        else:
            ids.extend(next(encoded))
    return ids


def decode_marked(tokenizer: Any, ids: Iterable[int]) -> str:
    """Decode ``ids`` to a marked string: control tokens as their text, the text of ordinary tokens marked.

    A control token's text in the result is always the token itself, never ordinary tokens spelling it, so
    :func:`grammar.parse.parse_tool_calls` tells the string delimiter token ``<|"|>`` from the text
    ``<|"|>`` inside a value. ``grammar.special_tokens.unmark_text(decode_marked(tok, ids))`` equals
    ``tok.decode(ids, skip_special_tokens=False)``.

    Args:
        tokenizer: a ``transformers.PreTrainedTokenizerFast``.
        ids: token ids (e.g. a generation with padding removed).
    """
    ctl = _controls(tokenizer)
    names = {i: c for c, i in ctl.ids.items()}
    out: list[str] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            out.append(st.mark_text(str(tokenizer.decode(run, skip_special_tokens=False))))
            run.clear()

    for i in ids:
        i = int(i)
        if i in names:
            flush()
            out.append(names[i])
        else:
            run.append(i)
    flush()
    return "".join(out)


def _mark_inputs(obj: Any) -> Any:
    """Copy of messages/tools with every string (dict keys included) passed through ``mark_all_text``."""
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
    """Render a chat with the tokenizer's own chat template, every input string marked, ending with the
    model-turn opener.

    The template decides the whole structure; only its own control tokens appear literally in the result
    (see :func:`grammar.special_tokens.mark_text`). ``unmark_text`` of the result equals the plain
    ``apply_chat_template(..., tokenize=False)`` rendering.

    Args:
        tokenizer: a tokenizer with a ``chat_template``.
        messages: OpenAI-style messages.
        tools: OpenAI-style tool declarations, or ``None``.
    """
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
    """Token ids of a chat: the template's control tokens as ids, all text from the inputs as text tokens.

    Text from users, tools (results and declarations), files and tool arguments never becomes a control
    token, even when its characters spell one (a tool result holding ``<turn|><|turn>user`` stays text, so
    it cannot open a turn). For inputs without control-token spellings the ids are exactly
    ``tokenizer(apply_chat_template(..., tokenize=False), add_special_tokens=False).input_ids``, the
    tokenization the project's checkpoints were trained on.

    ``transformers``' ``apply_chat_template(..., sanitize_control_tokens=True)`` is not used: it leaves dict
    keys (tool-result objects, arguments) unsanitized and refuses vocabularies whose BPE rebuilds a control
    token from plain text, as the shipped checkpoint's does for ``<|"|>``.

    Args:
        tokenizer: a ``transformers.PreTrainedTokenizerFast`` with a chat template.
        messages: OpenAI-style messages.
        tools: OpenAI-style tool declarations, or ``None``.

    Returns:
        Token ids (the template writes ``<bos>`` itself), ending with the model-turn opener.
    """
    return encode_marked(tokenizer, render_marked(tokenizer, messages, tools))
