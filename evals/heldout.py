"""Evaluation on the held-out synthetic split (disjoint data stream and Glaive tools): ``agentkit eval heldout``,
:mod:`evals.tune`'s settings grid, and the before/after scores :func:`model.training.specialize.specialize` is
given (:func:`evaluate_examples`)."""

from __future__ import annotations

import re
import time
from typing import Any

from model.training.data import Example, Generator

_CALL_KINDS = ("call", "parallel", "multi_call", "followup_call", "bot_call")


def same_value(a: Any, b: Any) -> bool:
    """JSON equality at any depth: numbers by value (``1 == 1.0``), but a boolean matches only a boolean
    (Python's ``True == 1`` does not count)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_value, a, b))
    return bool(a == b)


def calls_match(expected: list[tuple[str, dict[str, Any]]], got: list[tuple[str, dict[str, Any]]]) -> bool:
    """Order-free exact match of calls, arguments compared by :func:`same_value` (``1.0`` matches ``1``,
    ``True`` only ``True``)."""
    rest = list(got)
    if len(rest) != len(expected):
        return False
    for n, a in expected:
        i = next((i for i, (m, b) in enumerate(rest) if m == n and same_value(a, b)), None)
        if i is None:
            return False
        del rest[i]
    return True


#: Facts an answer must carry: words with a digit (numbers, dates, ``path:line``) and paths.
_FACT = re.compile(r"[\w./:-]*\d[\w./:-]*|[A-Za-z_][\w.-]*/[\w./-]+")
_ANSWER_KINDS = ("answer_after_tool", "bot_answer")


def answer_facts(target: str) -> list[str]:
    """The facts of an expected answer that a generated one must repeat (numbers, dates, paths), punctuation
    at their ends removed."""
    return [f.strip(".:,;-") for f in _FACT.findall(target.replace("<turn|>", "")) if f.strip(".:,;-")]


def score_example(ex: Example, calls: list[tuple[str, dict[str, Any]]], text: str = "") -> bool:
    """Correct when the calls match exactly (call examples), or, for prose examples, no call was made and, after
    a tool response, the answer ``text`` repeats every fact of the expected one (:func:`answer_facts`)."""
    if ex.calls:
        return calls_match(ex.calls, calls)
    if calls:
        return False
    if ex.kind in _ANSWER_KINDS:
        return all(f in text for f in answer_facts(ex.target))
    return True


def evaluate_heldout(
    chat_model: Any, *, limit: int = 100, seed: int = 0, binder: Any = None
) -> dict[str, Any]:
    """:func:`evaluate_examples` on ``limit`` examples of ``Generator(seed, "heldout")`` with ``binder``."""
    return evaluate_examples(chat_model, Generator(seed, "heldout").take(limit), binder=binder)


def argument_hits(
    expected: list[tuple[str, dict[str, Any]]], calls: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, bool]]:
    """For each expected argument, its kind (``string``, ``number``, or the value's type name) and whether the
    first call of the same tool gives it the same value (:func:`same_value`: ``1.0`` matches ``1``, a boolean only a
    boolean)."""
    got: dict[str, dict[str, Any]] = {}
    for name, args in calls:
        got.setdefault(name, args)
    out = []
    for name, args in expected:
        for key, value in args.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            kind = "number" if number else "string" if isinstance(value, str) else type(value).__name__
            mine = got.get(name, {})
            out.append((kind, key in mine and same_value(mine[key], value)))
    return out


def _result(ex: Example, calls: list[tuple[str, dict[str, Any]]], text: str, **fields: Any) -> dict[str, Any]:
    """One example's row of :func:`evaluate_examples` (``fields``: ``parsed``, ``latency_s``, ``raw``)."""
    return {
        "kind": ex.kind,
        "correct": fields["parsed"] and score_example(ex, calls, text),
        "names_correct": fields["parsed"] and sorted(n for n, _ in calls) == sorted(n for n, _ in ex.calls),
        "expected": ex.target,
        "unfit": ex.kind == "unanswerable" or (ex.kind == "no_tool" and bool(ex.tools)),
        "calls_made": len(calls),
        "arguments": argument_hits(ex.calls, calls),
        **fields,
    }


def _share(rows: list[Any]) -> dict[str, Any]:
    return {"n": len(rows), "accuracy": sum(map(bool, rows)) / len(rows) if rows else 0.0}


def evaluate_examples(
    chat_model: Any, examples: list[Example], log: Any = None, binder: Any = None
) -> dict[str, Any]:
    """Run ``chat_model.chat`` on ``examples`` (seed: the index; a turn that raises is wrong); ``log`` gets a
    progress line every 25 examples.

    Returns:
        ``n``, ``accuracy``, ``mean_latency_s``, ``call_name_accuracy`` (call examples with the right function
        names), ``call_accuracy`` (exact calls), ``n_calls``; ``{"n", "accuracy"}`` figures ``by_kind``,
        ``argument_accuracy`` (by value kind, :func:`argument_hits`), ``unfit_in_prose`` (requests no offered tool
        fits, answered without a call), ``fit_with_a_call``; and the per-example ``results``.
    """
    results: list[dict[str, Any]] = []
    for i, ex in enumerate(examples):
        if log is not None and i and i % 25 == 0:
            log(f"  evaluated {i}/{len(examples)}")
        t0 = time.perf_counter()
        try:
            out = chat_model.chat(ex.messages, ex.tools or None, seed=i, binder=binder)
        except Exception as exc:  # unconstrained (no tools) output that does not parse
            results.append(
                _result(ex, [], "", parsed=False, latency_s=time.perf_counter() - t0, raw=f"<error: {exc}>")
            )
            continue
        calls = [(c.name, c.arguments) for c in out.tool_calls]
        results.append(
            _result(ex, calls, out.text, parsed=True, latency_s=time.perf_counter() - t0, raw=out.raw)
        )
    kinds = sorted({r["kind"] for r in results})
    hits = [h for r in results for h in r["arguments"]]
    called = [r for r in results if r["kind"] in _CALL_KINDS]
    n = len(results)
    return {
        "n": n,
        "accuracy": _share([r["correct"] for r in results])["accuracy"],
        "mean_latency_s": sum(r["latency_s"] for r in results) / n if n else 0.0,
        "call_name_accuracy": _share([r["names_correct"] for r in called])["accuracy"],
        "call_accuracy": _share([r["correct"] for r in called])["accuracy"],
        "n_calls": len(called),
        "by_kind": {k: _share([r["correct"] for r in results if r["kind"] == k]) for k in kinds},
        "argument_accuracy": {
            k: _share([ok for kk, ok in hits if kk == k]) for k in sorted({k for k, _ in hits})
        },
        "unfit_in_prose": _share([r["calls_made"] == 0 for r in results if r["unfit"]]),
        "fit_with_a_call": _share([r["calls_made"] > 0 for r in called]),
        "results": results,
    }
