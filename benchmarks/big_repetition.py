"""Compile time of schemas with a large bounded repetition, per request, as ``agentkit serve`` pays it.

For each case, the work a request's tool (or ``response_format``) costs before generation starts: the grammar
(``grammar.turn.tool_call_grammar`` / ``response_format_grammar``, its LRU cache missed by a fresh description),
the llguidance matcher on the shipped checkpoint's tokenizer (vocabulary 8,192) and the constraint's shortest
completion (``GrammarConstraint.min_completion_tokens(4096)``, which ``serve`` runs to check a tool and to
size the token budget). A case the grammar refuses (a ``SchemaError``) is timed to the refusal.

    .venv/bin/python benchmarks/big_repetition.py [--quick] [--json]

Target: every case compiles (or is refused) in under 1 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, target

CHECKPOINT = Path(__file__).resolve().parents[1] / "model" / "checkpoints" / "agentkit-tiny"

#: name -> (the schema of the one required property ``x`` of a tool, or of a response_format object).
TOOL_CASES: dict[str, dict[str, Any]] = {
    "pattern_exact_3000": {"type": "string", "pattern": "^.{3000}$"},
    "min_length_3000": {"type": "string", "minLength": 3000},
    "max_length_5000": {"type": "string", "maxLength": 5000},
    "pattern_10_to_4000": {"type": "string", "pattern": "^[a-z]{10,4000}$"},
    "min_items_2000_integers": {"type": "array", "items": {"type": "integer"}, "minItems": 2000},
    "min_items_1000_strings": {"type": "array", "items": {"type": "string"}, "minItems": 1000},
    "min_properties_500": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "minProperties": 500,
    },
    "integer_range_1e15": {"type": "integer", "minimum": -(10**15), "maximum": 10**15},
    "multiple_of_999983": {"type": "integer", "multipleOf": 999_983},
    "number_minimum_1e100": {"type": "number", "minimum": 1e100},
}
RESPONSE_CASES: dict[str, dict[str, Any]] = {
    "response_pattern_exact_3000": {"type": "string", "pattern": "^.{3000}$"},
    "response_min_length_3000": {"type": "string", "minLength": 3000},
    "response_min_items_2000": {"type": "array", "items": {"type": "integer"}, "minItems": 2000},
}


def one_request(tok: Any, name: str, prop: dict[str, Any], rep: int) -> tuple[float, str]:
    """Seconds for one request's constraint of case ``name``, and what came of it."""
    from grammar.llg import new_matcher
    from grammar.turn import response_format_grammar, tool_call_grammar
    from model.constraints.denoise import GrammarConstraint
    from schema import SchemaError

    params = {"type": "object", "properties": {"x": prop}, "required": ["x"]}
    t0 = time.perf_counter()
    try:
        if name.startswith("response_"):
            grammar = response_format_grammar({**params, "description": f"rep {rep}"}, strict=True)
        else:
            decl = {"name": "f", "description": f"rep {rep}", "parameters": params}
            extra = name.startswith("min_properties")
            grammar = tool_call_grammar(
                [{"type": "function", "function": decl}], {"name": "f"}, additional_properties=extra
            )
        constraint = GrammarConstraint(new_matcher(tok, grammar), tok)
        n = constraint.min_completion_tokens(4096)
        outcome = f"shortest completion {n} tokens" if n < 4096 else "no completion within 4096 tokens"
    except SchemaError as exc:
        outcome = f"refused: {str(exc)[:160]}"
    return time.perf_counter() - t0, outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one request per case (default: best of 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from grammar.llg import llg_tokenizer

    tok = AutoTokenizer.from_pretrained(str(CHECKPOINT))
    llg_tokenizer(tok)  # built once per process, as the server does at start
    cases = {**TOOL_CASES, **RESPONSE_CASES}
    wanted = [c for c in args.cases.split(",") if c] or list(cases)
    reps = 1 if args.quick else 3
    results: dict[str, dict[str, Any]] = {}
    for name in wanted:
        runs = [one_request(tok, name, cases[name], r) for r in range(reps)]
        best = min(s for s, _ in runs)
        results[name] = {"seconds": round(best, 4), "outcome": runs[0][1]}
        if not args.json:
            print(f"{name}: {best:.3f} s ({runs[0][1]})", flush=True)
    report = {
        "benchmark": "big_repetition",
        "tokenizer": "agentkit-tiny (vocabulary 8,192)",
        "reps": reps,
        "cases": results,
        "targets": [target(f"{n}_seconds", r["seconds"], 1.0, False) for n, r in results.items()],
    }
    emit(report, args.json)


if __name__ == "__main__":
    main()
