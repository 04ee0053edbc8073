"""A pointer-generator copy head for DiffusionGemma-architecture checkpoints.

``model.heads.copy_model.DiffusionGemmaWithCopyHead`` (selected by a ``copy_head`` entry in ``config.json``)
returns, as ``logits``, the log of the mixture

    p(v | i) = g_i * softmax(lm_head(h_i))[v] + (1 - g_i) * sum_r alpha(i, r) * [v is a variant of x_r]

where ``h_i`` is the decoder's final state at canvas position ``i``, ``x_r`` the token at encoded position ``r``
(every position the KV cache holds except control tokens and system turns), ``alpha`` a pointer distribution and
``g_i`` a sigmoid gate (See et al. 2017, arXiv:1704.04368). Being a log-probability over the vocabulary, it feeds
the sampler, constraint and kernel unchanged; the logit soft-cap applies to ``lm_head``'s logits before mixing.

The pointer score is ``s(i, r) = q_i . k_r / sqrt(D) + beta_i * match(i, r)``: ``k_r`` projects the encoder's states
at ``r .. r+lookahead`` (right context; kept in :class:`CopyMemory`), ``q_i`` projects ``h_i``, their first ``dim``
coordinates a binding space trained to align with each declared parameter's name; ``match`` is 1 when the tokens
left of ``i`` and of ``r`` are the same word (an induction feature; Olsson et al. 2022). Byte-level BPE spells a
word differently after a space, so each source token feeds its stripped and its spaced form, split by ``sigmoid(a_i
+ b * match * (+1 if x_r is spaced else -1))``; with ``spaced_word_starts`` a token inside a word has no spaced
form."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from torch import nn
from torch.nn import functional as F

from model.errors import invalid_entry

#: A token id.
_ID = Annotated[int, Field(ge=0)]


class CopyHeadConfig(BaseModel):
    """Shape and source rules of a copy head (the ``copy_head`` entry of ``config.json``; strict types).

    Attributes:
        dim: width of the binding space (keys, queries and declaration states share it).
        free_dim: extra pointer coordinates outside the binding space.
        lookahead: encoder states right of a source position that its key sees.
        turn_start_id, turn_end_id: ids of ``<|turn>`` and ``<turn|>``.
        excluded_role_ids: role tokens whose turns are never copied from (the system turn).
        spaced_word_starts: a copied token takes its spaced form only where it starts a word in the source
            (absent = off).
        answer_match_responses: ids of ``<|tool_response>`` and ``<tool_response|>``: in a turn that already holds a
            tool response, the induction match counts only positions inside tool responses (absent or ``None`` =
            off)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    dim: int = Field(default=64, gt=0)
    free_dim: int = Field(default=32, ge=0)
    lookahead: int = Field(default=2, ge=0)
    turn_start_id: int = 4
    turn_end_id: int = 5
    excluded_role_ids: list[_ID] = Field(default_factory=list)
    spaced_word_starts: bool = False
    answer_match_responses: list[_ID] | None = Field(default=None, min_length=2, max_length=2)

    @field_validator("answer_match_responses")
    @classmethod
    def _two_ids(cls, ids: list[int] | None) -> list[int] | None:
        if ids is not None and ids[0] == ids[1]:
            raise ValueError("answer_match_responses must be [start_id, end_id] of the tool-response tokens")
        return ids

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CopyHeadConfig:
        """Build from the ``copy_head`` dict of ``config.json``; ValueError on an unknown or missing key or a value
        of the wrong type or range."""
        missing = [k for k in COPY_HEAD_FIELDS if k not in d and k not in OPTIONAL_FIELDS]
        if missing:  # the defaults need not be what the weights were trained with
            raise ValueError(
                f"copy_head: missing keys {missing} (only {', '.join(OPTIONAL_FIELDS)} may be left out)"
            )
        try:
            return cls.model_validate(d)
        except ValidationError as exc:
            raise ValueError(invalid_entry("copy_head", exc, COPY_HEAD_FIELDS)) from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict for ``config.json`` (the :data:`OPTIONAL_FIELDS` only when on)."""
        return self.model_dump(exclude={k for k in OPTIONAL_FIELDS if not getattr(self, k)})


#: Keys of the ``copy_head`` entry in ``config.json``.
COPY_HEAD_FIELDS = tuple(CopyHeadConfig.model_fields)
#: Keys of the ``copy_head`` entry that may be left out (their rule is then off).
OPTIONAL_FIELDS = ("spaced_word_starts", "answer_match_responses")


@dataclass
class CopyMemory:
    """The copy head's view of every encoded position, kept beside the KV cache.

    Attributes:
        ids: ``[B, R]`` int64 token ids of the encoded positions.
        keys: ``[B, R, D]`` pointer keys (model dtype).
        mask: ``[B, R]`` bool, True where a position may be copied.
        prev_base: ``[B, R]`` int64 stripped form of the token left of each position (``-1`` at ``r = 0``).
        tail: ``[B, lookahead, H]`` encoder states of the last positions (their keys are recomputed later).
        in_excluded: ``[B]`` bool, the sequence ends inside an excluded (system) turn.
        match_sources: ``[B, R]`` int64 cache of :meth:`CopyHead._match_sources`; ``None`` until derived."""

    ids: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    prev_base: torch.Tensor
    tail: torch.Tensor
    in_excluded: torch.Tensor
    match_sources: torch.Tensor | None = field(default=None, repr=False, compare=False)


def _excluded_turns(ids: torch.Tensor, cfg: CopyHeadConfig, start_inside: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool positions inside an excluded turn (``start_inside``: from a previous call)."""
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
    """``(word_piece, ends_alnum)``, both ``[vocab_size]`` bool: a token's text starts with a letter or digit (no
    leading space), and ends with one."""
    text = [
        tokenizer.convert_tokens_to_string([p]) for p in tokenizer.convert_ids_to_tokens(range(vocab_size))
    ]
    return torch.tensor([t[:1].isalnum() for t in text]), torch.tensor([t[-1:].isalnum() for t in text])


def inside_word(
    ids: torch.Tensor, prev: torch.Tensor, word_piece: torch.Tensor, ends_alnum: torch.Tensor
) -> torch.Tensor:
    """``[B, R]`` bool: each token continues the word of its left neighbour ``prev`` (``-1``: none); tables from
    :func:`word_tables`."""
    return word_piece[ids] & (prev >= 0) & ends_alnum[prev.clamp(min=0)]


class CopyHead(nn.Module):
    """Pointer, gates and binding projections of the copy head.

    Args:
        hidden_size: the model's hidden width ``H``.
        vocab_size: vocabulary size ``V``.
        cfg: :class:`CopyHeadConfig`.

    Buffers (saved with the weights; filled by :meth:`set_token_tables`): ``base_ids`` and ``spaced_ids`` ``[V]``
    int64 (a token's form without and with a leading space, or itself), ``is_spaced`` and ``copyable`` ``[V]`` bool;
    with ``spaced_word_starts``, ``word_piece`` and ``ends_alnum`` (:func:`word_tables`)."""

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
        """Initial weights: small projections, gate favouring the vocabulary."""
        for lin in (self.key_proj, self.query_proj, self.decl_proj):
            nn.init.normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)
        nn.init.normal_(self.none_key, std=0.02)
        nn.init.zeros_(self.ctrl.weight)
        with torch.no_grad():
            self.ctrl.bias.copy_(torch.tensor([1.0, 0.0, 3.0]))
            self.match_spacing.fill_(4.0)

    def set_token_tables(self, tokenizer: Any) -> None:
        """Fill the variant tables from a byte-level BPE ``tokenizer`` (a leading space is ``Ġ``)."""
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
        tables: dict[str, Any] = dict(base_ids=base, spaced_ids=spaced, is_spaced=is_sp, copyable=copyable)
        if self.cfg.spaced_word_starts:
            tables["word_piece"], tables["ends_alnum"] = word_tables(tokenizer, V)
        with torch.no_grad():
            for name, values in tables.items():
                buffer = getattr(self, name)
                buffer.copy_(torch.as_tensor(values).to(buffer.device))

    def _keys(self, hidden: torch.Tensor) -> torch.Tensor:
        """Keys of positions ``0 .. L-1-lookahead`` of ``hidden`` ``[B, L, H]``."""
        la = self.cfg.lookahead
        n = hidden.shape[1] - la
        parts = [hidden[:, k : k + n] for k in range(la + 1)]
        return self.key_proj(torch.cat(parts, dim=-1))

    def new_memory(
        self, ids: torch.Tensor, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> CopyMemory:
        """Memory of a freshly encoded prompt: ``ids`` ``[B, P]`` (left padding allowed), ``hidden`` ``[B, P, H]``
        the encoder's final states, ``attention_mask`` ``[B, P]`` 0 on padding (default all ones)."""
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
        """A new memory with the committed ``ids`` ``[B, C]`` and their encoder states ``hidden`` ``[B, C, H]``
        appended; the keys of the last ``lookahead`` old positions are recomputed with their new context."""
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

    def pointer(self, h: torch.Tensor, canvas: torch.Tensor, mem: CopyMemory) -> dict[str, torch.Tensor]:
        """Pointer distribution and gates for a canvas.

        Args:
            h: ``[B, C, H]`` decoder final hidden states.
            canvas: ``[B, C]`` int64 decoder input ids.
            mem: :class:`CopyMemory` with ``R`` positions.

        Returns:
            dict with ``log_alpha`` ``[B, C, R]`` float32 (``-inf`` at masked positions), ``log_gate`` /
            ``log_copy_gate`` ``[B, C]`` (``-inf`` copy gate for rows with nothing to copy), ``log_spaced`` /
            ``log_stripped`` ``[B, C, R]``, ``query`` ``[B, C, D]``."""
        d_all = self.cfg.dim + self.cfg.free_dim
        q = self.query_proj(h)
        scores = torch.einsum("bcd,brd->bcr", q.float(), mem.keys.float()) / math.sqrt(d_all)
        ctrl = self.ctrl(h).float()
        left = torch.cat([mem.ids[:, -1:], canvas[:, :-1]], dim=1)  # token left of each position
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
        """``[B, R]`` source forms for the induction match (``-3`` where ruled out); cached on ``mem``."""
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
        """``(log_spaced, log_stripped)`` ``[B, C, R]``, all-stripped inside a word with ``spaced_word_starts``."""
        if not self.cfg.spaced_word_starts:
            return ptr["log_spaced"], ptr["log_stripped"]
        inside = inside_word(mem.ids, mem.prev_base, self.word_piece, self.ends_alnum)[:, None, :]
        # -1e4, not -inf: exp(-1e4) is 0 in float32 and gradients stay finite
        log_sp = ptr["log_spaced"].masked_fill(inside, -1e4)
        return log_sp, ptr["log_stripped"].masked_fill(inside, 0.0)

    def mixture_logits(
        self, vocab_logits: torch.Tensor, ptr: dict[str, torch.Tensor], mem: CopyMemory
    ) -> torch.Tensor:
        """``[B, C, V]`` float32 log of the vocabulary/copy mixture (finite wherever ``softmax(vocab_logits)`` is
        non-zero), from the soft-capped ``vocab_logits`` ``[B, C, V]`` and :meth:`pointer`'s ``ptr`` over ``mem``."""
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
        """Log-probability of ``target`` ``[B, C]`` under the mixture, by gathers.

        Returns:
            ``(log_p_mix, log_p_pointer)``, both ``[B, C]``: the mixture's log-probability of the target, and the
            pointer's log mass on sources whose stripped form equals the target's (about ``-1e4`` where none does)."""
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
        """``[B, N, 1 + K]`` float32 scores of ``keys`` ``[B, N, D]`` (binding coordinates only) against the
        declared parameters' states ``decl`` ``[B, K, H]``, a "none" class first."""
        d = self.cfg.dim
        z = self.decl_proj(decl).float()
        kb = keys[..., :d].float()
        none = (kb @ self.none_key.float())[..., None]
        return torch.cat([none, torch.einsum("bnd,bkd->bnk", kb, z)], dim=-1) / math.sqrt(d)


def has_copy_head(model: Any) -> bool:
    """True when ``model`` carries a :class:`CopyHead`."""
    return isinstance(getattr(model, "copy_head", None), CopyHead)
