"""A pointer-generator copy head for DiffusionGemma-architecture checkpoints.

``model.heads.copy_model.DiffusionGemmaWithCopyHead`` is a thin subclass of ``transformers.DiffusionGemmaForBlockDiffusion``, selected by
a ``copy_head`` entry in ``config.json`` (its weights live in ``model.safetensors`` beside the others). Its
decoder returns, as ``logits``, the log of the mixture

    p(v | i) = g_i * softmax(lm_head(h_i))[v] + (1 - g_i) * sum_r alpha(i, r) * [v is a variant of x_r]

over the vocabulary, where ``h_i`` is the decoder's final hidden state at canvas position ``i``, ``x_r`` the
token at encoded position ``r`` (prompt, tool responses, committed canvases: every position the KV cache holds,
except control tokens and system turns), ``alpha(i, .)`` a pointer distribution over those positions and
``g_i`` a sigmoid gate (See et al. 2017, "Get To The Point: Summarization with Pointer-Generator Networks",
arXiv:1704.04368). Because it is a log-probability over the vocabulary, the sampler, the entropy bound, the
constraint, self-conditioning and the fused kernel consume it unchanged; the model's final logit soft-cap is
applied once, to ``lm_head``'s logits, before mixing.

The pointer score is

    s(i, r) = q_i . k_r / sqrt(D) + beta_i * match(i, r)

* ``k_r``: a projection of the encoder's final states at ``r, r+1, .., r+lookahead`` (a little right context,
  since DiffusionGemma's encoder is causal: "3 *days*"). The runtime keeps these keys beside the KV cache
  (:class:`CopyMemory`: at prefill and at each committed canvas).
* ``q_i``: a projection of ``h_i``. The first ``dim`` coordinates of keys and queries live in a *binding
  space* that training aligns with the encoder's state at each declared parameter's name (dense binding
  supervision: every request token is labelled with the parameter whose value it belongs to, or "none";
  every value token of a call with the parameter it fills). A value position's query then points at the
  request tokens bound to the parameter it is filling.
* ``match(i, r)``: 1 when the canvas token left of ``i`` and the source token left of ``r`` are the same word
  (compared on their space-stripped form), so the next token of a multi-token value is the one after the
  token just copied (an explicit induction feature; Olsson et al. 2022, "In-context Learning and Induction
  Heads"); ``beta_i >= 0`` is learned per position.

Byte-level BPE writes a word differently after a space (``ĠBerlin`` in a request) than after ``<|"|>`` (``Berlin``
in a call). Each copied source token therefore contributes to two vocabulary entries, its stripped form and its
spaced form, split by ``sigma(i, r) = sigmoid(a_i + b * match(i, r) * (+1 if x_r is spaced else -1))``: at a
span start the decoder's state decides (after ``<|"|>`` a value starts unspaced; in prose a copied word is
spaced), inside a span the source's own spacing is kept.
With ``spaced_word_starts`` (a ``copy_head`` entry of ``config.json``, off when absent) a source token inside a
word (``gent``, ``k``, ``it`` of ``a gent k it``, as JSON spells ``agentkit``) has no spaced form: ``Ġit`` cannot
start a copied word, so a word copied after a space starts at its first piece (``Ġa``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

#: Keys of the ``copy_head`` entry in ``config.json``.
COPY_HEAD_FIELDS = (
    "dim",
    "free_dim",
    "lookahead",
    "turn_start_id",
    "turn_end_id",
    "excluded_role_ids",
    "spaced_word_starts",
    "answer_match_responses",
)
#: Keys of the ``copy_head`` entry that may be left out (their rule is then off).
OPTIONAL_FIELDS = ("spaced_word_starts", "answer_match_responses")


@dataclass
class CopyHeadConfig:
    """Shape and source rules of a copy head (the ``copy_head`` entry of ``config.json``).

    Attributes:
        dim: width of the binding space (keys, queries and declaration states share it).
        free_dim: extra pointer coordinates outside the binding space.
        lookahead: encoder states to the right of a source position that its key sees (tokens).
        turn_start_id, turn_end_id: ids of ``<|turn>`` and ``<turn|>``.
        excluded_role_ids: role tokens (the token after ``<|turn>``) whose turns are never copied from (the
            system turn: tool names, keys and descriptions, which the grammar forces anyway).
        spaced_word_starts: a copied token takes its spaced form only where it starts a word in the source (not
            ``it`` of ``a gent k it``: its copy is always the stripped form). Absent from ``config.json`` = off.
        answer_match_responses: ``[start_id, end_id]``, the ids of ``<|tool_response>`` and ``<tool_response|>``:
            in a turn that already holds a tool response (an answer turn), the induction match counts only source
            positions inside tool responses, not the question (after ``is`` the question's ``the`` is not the
            next word of an answer). Absent from ``config.json`` or ``null`` (``None``) = off: the match counts
            every source. ``model.checkpoint.loading`` checks the ids against the checkpoint's tokenizer.
    """

    dim: int = 64
    free_dim: int = 32
    lookahead: int = 2
    turn_start_id: int = 4
    turn_end_id: int = 5
    excluded_role_ids: list[int] = field(default_factory=list)
    spaced_word_starts: bool = False
    answer_match_responses: list[int] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CopyHeadConfig:
        """Build from the ``copy_head`` dict of ``config.json``.

        Raises:
            ValueError: on an unknown or missing key, a non-integer or non-positive size or token id, ``excluded_role_ids``
                not a list of ids, a non-boolean ``spaced_word_starts``, or an ``answer_match_responses`` that is
                not two token ids.
        """
        unknown = set(d) - set(COPY_HEAD_FIELDS)
        if unknown:
            raise ValueError(f"copy_head: unknown keys {sorted(unknown)} (known: {list(COPY_HEAD_FIELDS)})")
        missing = [k for k in COPY_HEAD_FIELDS if k not in d and k not in OPTIONAL_FIELDS]
        if missing:  # the defaults need not be what the weights were trained with
            raise ValueError(
                f"copy_head: missing keys {missing} (only {', '.join(OPTIONAL_FIELDS)} may be left out)"
            )
        cfg = cls(**{k: d[k] for k in COPY_HEAD_FIELDS if k in d})
        ints = ("dim", "free_dim", "lookahead", "turn_start_id", "turn_end_id")
        bad = [k for k in ints if isinstance(getattr(cfg, k), bool) or not isinstance(getattr(cfg, k), int)]
        if bad:
            raise ValueError(
                f"copy_head: {', '.join(bad)} must be integers, got {[getattr(cfg, k) for k in bad]}"
            )
        roles = cfg.excluded_role_ids
        if not isinstance(roles, list) or not all(_is_id(r) for r in roles):
            raise ValueError(f"copy_head: excluded_role_ids must be a list of token ids, got {roles!r}")
        if not isinstance(cfg.spaced_word_starts, bool):
            raise ValueError(
                f"copy_head: spaced_word_starts must be true or false, got {cfg.spaced_word_starts!r}"
            )
        resp = cfg.answer_match_responses
        if resp is not None and not (
            isinstance(resp, list) and len(resp) == 2 and all(_is_id(r) for r in resp) and resp[0] != resp[1]
        ):
            raise ValueError(
                "copy_head: answer_match_responses must be [start_id, end_id] of the tool-response tokens, "
                f"got {json.dumps(resp)}"
            )
        if cfg.dim <= 0 or cfg.free_dim < 0 or cfg.lookahead < 0:
            raise ValueError(f"copy_head: dim must be > 0 and free_dim, lookahead >= 0, got {d}")
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict for ``config.json`` (the :data:`OPTIONAL_FIELDS` only when on)."""
        out = {k: getattr(self, k) for k in COPY_HEAD_FIELDS}
        for k in OPTIONAL_FIELDS:
            if not out[k]:
                del out[k]
        return out


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


@dataclass
class CopyMemory:
    """The copy head's view of every encoded position, kept beside the KV cache.

    Attributes:
        ids: ``[B, R]`` int64 token ids of the encoded positions.
        keys: ``[B, R, D]`` pointer keys (model dtype).
        mask: ``[B, R]`` bool, True where a position may be copied (not padding, not a control token, not in
            a system turn).
        prev_base: ``[B, R]`` int64 stripped form of the token left of each position (``-1`` at ``r = 0``).
        tail: ``[B, lookahead, H]`` encoder states of the last ``lookahead`` positions (their keys are
            recomputed when more positions arrive).
        in_excluded: ``[B]`` bool, the sequence ends inside an excluded (system) turn.
        match_sources: ``[B, R]`` int64, what :meth:`CopyHead._match_sources` derived from ``ids`` and
            ``prev_base`` (kept so that the denoising steps over one memory derive it once); ``None`` until then.
    """

    ids: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    prev_base: torch.Tensor
    tail: torch.Tensor
    in_excluded: torch.Tensor
    match_sources: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def last_ids(self) -> torch.Tensor:
        """``[B]`` int64 id of the last encoded token (the left neighbour of canvas position 0)."""
        return self.ids[:, -1]


def _excluded_turns(ids: torch.Tensor, cfg: CopyHeadConfig, start_inside: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool: positions inside a turn whose role token is in ``cfg.excluded_role_ids``.

    A turn runs from ``<|turn>`` to the next ``<turn|>`` (both included). ``start_inside`` ``[B]`` says whether
    the sequence starts inside such a turn (incremental encoding).
    """
    rows = ids.tolist()
    out = torch.zeros(ids.shape, dtype=torch.bool)
    excluded = set(cfg.excluded_role_ids)
    for b, row in enumerate(rows):
        inside = bool(start_inside[b])
        for j, x in enumerate(row):
            if x == cfg.turn_start_id:
                inside = j + 1 < len(row) and row[j + 1] in excluded
            out[b, j] = inside
            if x == cfg.turn_end_id:
                inside = False
    return out.to(ids.device)


def word_tables(tokenizer: Any, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(word_piece, ends_alnum)``, both ``[vocab_size]`` bool: a token's text has no leading space and starts
    with a letter or digit (it continues a word after a token that ends with one), and its text ends with one."""
    text = [
        tokenizer.convert_tokens_to_string([p]) for p in tokenizer.convert_ids_to_tokens(range(vocab_size))
    ]
    return torch.tensor([t[:1].isalnum() for t in text]), torch.tensor([t[-1:].isalnum() for t in text])


def inside_word(
    ids: torch.Tensor, prev: torch.Tensor, word_piece: torch.Tensor, ends_alnum: torch.Tensor
) -> torch.Tensor:
    """``[B, R]`` bool: the token at each position continues the word of the token left of it (``gent``, ``k`` and
    ``it`` of ``a gent k it``). ``ids``/``prev``: ``[B, R]`` int64 tokens and their left neighbours (``-1``: none);
    ``word_piece``/``ends_alnum``: :func:`word_tables`."""
    return word_piece[ids] & (prev >= 0) & ends_alnum[prev.clamp(min=0)]


class CopyHead(nn.Module):
    """Pointer, gates and binding projections of the copy head (about 0.1M parameters at hidden 256).

    Args:
        hidden_size: the model's hidden width ``H``.
        vocab_size: vocabulary size ``V``.
        cfg: :class:`CopyHeadConfig`.

    Buffers (saved in ``model.safetensors``; set from the tokenizer by :meth:`set_token_tables`):
        base_ids ``[V]`` int64 (a token's id without its leading space, or itself), spaced_ids ``[V]`` int64 (with
        a leading space, or itself), is_spaced ``[V]`` bool, copyable ``[V]`` bool (not a control token); with
        ``spaced_word_starts``, word_piece ``[V]`` bool (no leading space, starts with a letter or digit: it
        continues a word after a token that ends with one) and ends_alnum ``[V]`` bool.
    """

    base_ids: torch.Tensor
    spaced_ids: torch.Tensor
    is_spaced: torch.Tensor
    copyable: torch.Tensor
    word_piece: torch.Tensor
    ends_alnum: torch.Tensor

    def __init__(self, hidden_size: int, vocab_size: int, cfg: CopyHeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d_all = cfg.dim + cfg.free_dim
        self.key_proj = nn.Linear(hidden_size * (1 + cfg.lookahead), d_all)
        self.query_proj = nn.Linear(hidden_size, d_all)
        self.decl_proj = nn.Linear(hidden_size, cfg.dim)
        self.none_key = nn.Parameter(torch.zeros(cfg.dim))
        # gate logit (vocab vs copy), spaced-variant logit a_i, match strength pre-activation
        self.ctrl = nn.Linear(hidden_size, 3)
        self.match_spacing = nn.Parameter(torch.tensor(4.0))
        self.register_buffer("base_ids", torch.arange(vocab_size), persistent=True)
        self.register_buffer("spaced_ids", torch.arange(vocab_size), persistent=True)
        self.register_buffer("is_spaced", torch.zeros(vocab_size, dtype=torch.bool), persistent=True)
        self.register_buffer("copyable", torch.ones(vocab_size, dtype=torch.bool), persistent=True)
        if cfg.spaced_word_starts:
            self.register_buffer("word_piece", torch.zeros(vocab_size, dtype=torch.bool), persistent=True)
            self.register_buffer("ends_alnum", torch.zeros(vocab_size, dtype=torch.bool), persistent=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initial weights: small projections, gate favouring the vocabulary, match strength about 3."""
        for lin in (self.key_proj, self.query_proj, self.decl_proj):
            nn.init.normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)
        nn.init.normal_(self.none_key, std=0.02)
        nn.init.zeros_(self.ctrl.weight)
        with torch.no_grad():
            self.ctrl.bias.copy_(torch.tensor([1.0, 0.0, 3.0]))
            self.match_spacing.fill_(4.0)

    # ---------------------------------------------------------------------------------------------------------
    def set_token_tables(self, tokenizer: Any) -> None:
        """Fill the variant tables from a tokenizer: stripped/spaced forms of each token and control tokens.

        Args:
            tokenizer: a ``PreTrainedTokenizerFast`` (byte-level BPE: a leading space is ``Ġ``).
        """
        V = self.base_ids.numel()
        vocab = tokenizer.get_vocab()
        by_piece = {p: i for p, i in vocab.items() if i < V}
        special = set(tokenizer.all_special_ids) | {
            i for i, t in tokenizer.added_tokens_decoder.items() if getattr(t, "special", False)
        }
        base = list(range(V))
        spaced = list(range(V))
        is_sp = [False] * V
        copyable = [True] * V
        for piece, i in by_piece.items():
            if i in special:
                copyable[i] = False
                continue
            if piece.startswith("Ġ") and len(piece) > 1:
                is_sp[i] = True
                j = by_piece.get(piece[1:])
                if j is not None and j not in special:
                    base[i] = j
                    spaced[j] = i
        with torch.no_grad():
            dev = self.base_ids.device
            if self.cfg.spaced_word_starts:
                word_piece, ends_alnum = word_tables(tokenizer, V)
                self.word_piece.copy_(word_piece.to(dev))
                self.ends_alnum.copy_(ends_alnum.to(dev))
            self.base_ids.copy_(torch.tensor(base, device=dev))
            self.spaced_ids.copy_(torch.tensor(spaced, device=dev))
            self.is_spaced.copy_(torch.tensor(is_sp, device=dev))
            self.copyable.copy_(torch.tensor(copyable, device=dev))

    # ---------------------------------------------------------------------------------------------------------
    def _keys(self, hidden: torch.Tensor) -> torch.Tensor:
        """Keys of positions ``0 .. L-1-lookahead`` of ``hidden`` ``[B, L, H]`` (right context inside it)."""
        la = self.cfg.lookahead
        n = hidden.shape[1] - la
        parts = [hidden[:, k : k + n] for k in range(la + 1)]
        return self.key_proj(torch.cat(parts, dim=-1))

    def new_memory(
        self, ids: torch.Tensor, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> CopyMemory:
        """Memory of a freshly encoded prompt.

        Args:
            ids: ``[B, P]`` int64 prompt ids (left padding allowed).
            hidden: ``[B, P, H]`` the encoder's final hidden states.
            attention_mask: ``[B, P]`` (bool or int), 0 on padding; default all ones.
        """
        B, P = ids.shape
        pad = hidden.new_zeros((B, self.cfg.lookahead, hidden.shape[-1]))
        keys = self._keys(torch.cat([hidden, pad], dim=1))
        start = torch.zeros(B, dtype=torch.bool)
        excl = _excluded_turns(ids, self.cfg, start)
        mask = self.copyable[ids] & ~excl
        if attention_mask is not None:
            mask = mask & attention_mask.bool()
        prev = torch.full_like(ids, -1)
        prev[:, 1:] = self.base_ids[ids[:, :-1]]
        tail = torch.cat([pad, hidden], dim=1)[:, -self.cfg.lookahead :] if self.cfg.lookahead else pad
        return CopyMemory(ids, keys, mask, prev, tail, excl[:, -1].cpu() if P else start)

    def extend_memory(self, mem: CopyMemory, ids: torch.Tensor, hidden: torch.Tensor) -> CopyMemory:
        """Memory after the encoder has committed more positions (a finished canvas).

        Args:
            mem: the memory so far (``R`` positions).
            ids: ``[B, C]`` int64 ids of the new positions.
            hidden: ``[B, C, H]`` their encoder final hidden states.

        Returns:
            A new :class:`CopyMemory` of ``R + C`` positions; the keys of the last ``lookahead`` old positions
            are recomputed with their new right context.
        """
        la = self.cfg.lookahead
        B = ids.shape[0]
        pad = hidden.new_zeros((B, la, hidden.shape[-1]))
        seq = torch.cat([mem.tail.to(hidden.dtype), hidden, pad], dim=1)
        new_keys = self._keys(seq)  # [B, la + C, D]: the last `la` old positions, then the new ones
        redo = min(la, mem.keys.shape[1])  # a memory shorter than the lookahead (a 1-token prompt) has fewer
        new_keys = new_keys[:, la - redo :]  # rows of `tail` before it are padding, not positions
        old = mem.keys[:, : mem.keys.shape[1] - redo]
        keys = torch.cat([old, new_keys], dim=1)
        excl = _excluded_turns(ids, self.cfg, mem.in_excluded)
        mask = torch.cat([mem.mask, self.copyable[ids] & ~excl], dim=1)
        all_ids = torch.cat([mem.ids, ids], dim=1)
        prev_new = self.base_ids[torch.cat([mem.ids[:, -1:], ids[:, :-1]], dim=1)]
        prev = torch.cat([mem.prev_base, prev_new], dim=1)
        tail = torch.cat([mem.tail.to(hidden.dtype), hidden], dim=1)[:, -la:] if la else mem.tail
        return CopyMemory(all_ids, keys, mask, prev, tail, excl[:, -1].cpu())

    # ---------------------------------------------------------------------------------------------------------
    def pointer(self, h: torch.Tensor, canvas: torch.Tensor, mem: CopyMemory) -> dict[str, torch.Tensor]:
        """Pointer distribution and gates for a canvas.

        Args:
            h: ``[B, C, H]`` decoder final hidden states.
            canvas: ``[B, C]`` int64 decoder input ids (the noisy canvas).
            mem: :class:`CopyMemory` with ``R`` positions.

        Returns:
            dict with ``log_alpha`` ``[B, C, R]`` float32 (log pointer distribution; ``-inf`` at masked
            positions), ``log_gate`` / ``log_copy_gate`` ``[B, C]`` (log g, log(1 - g); ``-inf`` copy gate for rows
            with nothing to copy), ``log_spaced`` / ``log_stripped`` ``[B, C, R]`` (variant split), ``query``
            ``[B, C, D]``.
        """
        d_all = self.cfg.dim + self.cfg.free_dim
        q = self.query_proj(h)
        scores = torch.einsum("bcd,brd->bcr", q.float(), mem.keys.float()) / math.sqrt(d_all)
        ctrl = self.ctrl(h).float()
        left = torch.cat([mem.last_ids[:, None], canvas[:, :-1]], dim=1)  # token left of each position
        left_ok = self.copyable[left]
        left_base = torch.where(left_ok, self.base_ids[left], torch.full_like(left, -2))
        match = (left_base[:, :, None] == self._match_sources(mem)[:, None, :]).float()  # [B, C, R]
        beta = F.softplus(ctrl[..., 2])
        scores = scores + beta[..., None] * match
        mask = mem.mask[:, None, :]
        scores = scores.masked_fill(~mask, float("-inf"))
        has_src = mem.mask.any(dim=1)  # [B]
        safe = torch.where(has_src[:, None, None], scores, torch.zeros_like(scores))
        log_alpha = torch.log_softmax(safe, dim=-1)
        log_alpha = torch.where(has_src[:, None, None], log_alpha, torch.full_like(log_alpha, float("-inf")))
        g = ctrl[..., 0]
        log_gate = F.logsigmoid(g)
        log_copy_gate = torch.where(has_src[:, None], F.logsigmoid(-g), torch.full_like(g, float("-inf")))
        log_gate = torch.where(has_src[:, None], log_gate, torch.zeros_like(g))
        sign = self.is_spaced[mem.ids].float() * 2 - 1  # [B, R]
        sp = ctrl[..., 1][..., None] + self.match_spacing * match * sign[:, None, :]
        return {
            "log_alpha": log_alpha,
            "log_gate": log_gate,
            "log_copy_gate": log_copy_gate,
            "log_spaced": F.logsigmoid(sp),
            "log_stripped": F.logsigmoid(-sp),
            "query": q,
        }

    def _match_sources(self, mem: CopyMemory) -> torch.Tensor:
        """``[B, R]`` int64: the left-neighbour form each source position offers to the induction match
        (``mem.prev_base``), ``-3`` (never equal to a canvas token) where ``answer_match_responses`` rules the
        position out: outside tool responses, in rows whose current turn (after the last ``<|turn>``) already
        holds a tool response. Derived once per memory (``mem.match_sources``): the memory changes only when a
        canvas is committed, which builds a new one."""
        resp = self.cfg.answer_match_responses
        if resp is None:
            return mem.prev_base
        if mem.match_sources is None:
            ids = mem.ids
            start, end = (ids == resp[0]).long().cumsum(1), (ids == resp[1]).long().cumsum(1)
            inside = start > end  # from <|tool_response> up to (not including) its <tool_response|>
            turn = (ids == self.cfg.turn_start_id).long().cumsum(1)
            current = turn == turn[:, -1:]
            answer_turn = ((ids == resp[1]) & current).any(dim=1)  # [B]
            mem.match_sources = mem.prev_base.masked_fill(answer_turn[:, None] & ~inside, -3)
        return mem.match_sources

    def _variant_split(
        self, ptr: dict[str, torch.Tensor], mem: CopyMemory
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_spaced, log_stripped)`` ``[B, C, R]``: the pointer's split, with ``spaced_word_starts`` forced to
        all-stripped at source positions inside a word (a word piece after a token ending with a letter/digit)."""
        if not self.cfg.spaced_word_starts:
            return ptr["log_spaced"], ptr["log_stripped"]
        inside = inside_word(mem.ids, mem.prev_base, self.word_piece, self.ends_alnum)[:, None, :]
        # -1e4, not -inf: exp(-1e4) is 0 in float32 and gradients stay finite
        log_sp = ptr["log_spaced"].masked_fill(inside, -1e4)
        return log_sp, ptr["log_stripped"].masked_fill(inside, 0.0)

    def mixture_logits(
        self, vocab_logits: torch.Tensor, ptr: dict[str, torch.Tensor], mem: CopyMemory
    ) -> torch.Tensor:
        """Log of the vocabulary/copy mixture over the whole vocabulary.

        Args:
            vocab_logits: ``[B, C, V]`` float32 soft-capped ``lm_head`` logits.
            ptr: output of :meth:`pointer`.
            mem: the memory the pointer was computed over.

        Returns:
            ``[B, C, V]`` float32 log-probabilities (finite wherever ``softmax(vocab_logits)`` is non-zero).
        """
        B, C, V = vocab_logits.shape
        R = mem.ids.shape[1]
        alpha = ptr["log_alpha"].exp()  # [B, C, R] (0 where masked)
        w_sp = alpha * self._variant_split(ptr, mem)[0].exp()
        w_st = alpha - w_sp
        p_copy = vocab_logits.new_zeros((B, C, V))
        sp_idx = self.spaced_ids[mem.ids][:, None, :].expand(B, C, R)
        st_idx = self.base_ids[mem.ids][:, None, :].expand(B, C, R)
        p_copy.scatter_add_(2, sp_idx, w_sp)
        p_copy.scatter_add_(2, st_idx, w_st)
        p = torch.softmax(vocab_logits, dim=-1).mul_(ptr["log_gate"].exp()[..., None])
        p.add_(p_copy.mul_(ptr["log_copy_gate"].exp()[..., None]))
        return p.clamp_min_(1e-30).log_()

    def target_logprob(
        self, vocab_logits: torch.Tensor, ptr: dict[str, torch.Tensor], mem: CopyMemory, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``target`` under the mixture, by gathers (no ``[B, C, V]`` copy tensor).

        Args:
            vocab_logits: ``[B, C, V]`` float32 soft-capped logits.
            ptr: output of :meth:`pointer`.
            mem: the memory.
            target: ``[B, C]`` int64 target ids.

        Returns:
            ``(log_p_mix [B, C], log_p_pointer [B, C])``: the mixture's log-probability of the target, and the
            pointer's log mass on sources whose stripped form equals the target's (about ``-1e4`` where none does).
        """
        log_vocab = torch.log_softmax(vocab_logits, dim=-1).gather(-1, target[..., None]).squeeze(-1)
        src_sp = self.spaced_ids[mem.ids][:, None, :]
        src_st = self.base_ids[mem.ids][:, None, :]
        tgt = target[:, :, None]
        # finite stand-ins for -inf keep every gradient finite (exp(-1e4) is 0 in float32)
        la = ptr["log_alpha"].clamp(min=-1e4)
        neg = torch.full_like(la, -1e4)
        log_sp, log_st = self._variant_split(ptr, mem)
        lp_sp = torch.where(src_sp == tgt, la + log_sp, neg)
        lp_st = torch.where(src_st == tgt, la + log_st, neg)
        log_copy = torch.logsumexp(torch.cat([lp_sp, lp_st], dim=-1), dim=-1)
        log_mix = torch.logaddexp(
            log_vocab + ptr["log_gate"], log_copy + ptr["log_copy_gate"].clamp(min=-1e4)
        )
        same = src_st == self.base_ids[target][:, :, None]
        log_ptr = torch.logsumexp(torch.where(same, la, neg), dim=-1)
        return log_mix, log_ptr

    def binding_logits(self, keys: torch.Tensor, decl: torch.Tensor) -> torch.Tensor:
        """Scores of source keys against declared parameters, with a "none" class first.

        Args:
            keys: ``[B, N, D]`` pointer keys (only the binding coordinates ``[:dim]`` are used).
            decl: ``[B, K, H]`` encoder states at each declared parameter's name.

        Returns:
            ``[B, N, 1 + K]`` float32 logits.
        """
        d = self.cfg.dim
        z = self.decl_proj(decl).float()
        kb = keys[..., :d].float()
        none = (kb @ self.none_key.float())[..., None]
        return torch.cat([none, torch.einsum("bnd,bkd->bnk", kb, z)], dim=-1) / math.sqrt(d)


def has_copy_head(model: Any) -> bool:
    """True when ``model`` carries a :class:`CopyHead` (``model.heads.copy_model.DiffusionGemmaWithCopyHead``)."""
    return isinstance(getattr(model, "copy_head", None), CopyHead)
