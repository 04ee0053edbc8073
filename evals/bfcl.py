"""BFCL (Berkeley Function Calling Leaderboard) AST scoring, re-implemented from its published rules.

Rules (BFCL ``eval_checker/ast_eval/ast_checker.py``, Python categories), implemented here independently:

- the called function's name must equal the expected one;
- every ``required`` parameter of the declaration is present;
- no parameter outside the declaration or outside the ground-truth entry;
- type checks: ``string``/``any`` -> str, ``integer`` -> int (a float fails; ``bool`` is not an int),
  ``float`` -> float (an int is accepted and converted), ``boolean`` -> bool, ``array``/``tuple`` -> list
  (items checked one level deep), ``dict`` -> dict; a value whose type matches the ground truth's own type
  (a "variable") is accepted as such;
- the value must be one of the accepted values; strings compare after normalisation (drop spaces and
  ``,./-_*^``, lower-case, ``'`` -> ``"``), also inside lists and dicts;
- a ground-truth parameter that the call leaves out must list ``""`` among its accepted values;
- simple: exactly one call; multiple: exactly one call, checked against the expected function;
  parallel / parallel_multiple: same number of calls, matched order-free (each expected call takes the first
  unmatched output call that satisfies it);
- irrelevance (a question file without answers): correct when no tool is called.

Data: one JSON object per line (``id``, ``question`` (list of turns, each a list of messages), ``function``);
answers: ``id``, ``ground_truth`` (list of ``{name: {param: [accepted values]}}``). The four categories the
project evaluates ship gzipped in ``evals/bfcl_data/`` (BFCL's Apache-2.0 licence and source are next
to them); other files, plain or ``.gz``, are read with ``--data``/``--answers``.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Default BFCL data folder: the four evaluated categories, shipped with the package (gzipped JSON lines).
DEFAULT_BFCL_DIR = Path(__file__).resolve().parent / "bfcl_data"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")

_PY_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "number": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "object": dict,
    "any": str,
}


@dataclass
class CheckResult:
    """Outcome of checking one model output against one ground truth: ``valid`` and an ``error`` message."""

    valid: bool
    error: str = ""
    error_type: str = ""


def normalize_string(s: str) -> str:
    """BFCL's string normalisation: remove spaces and ``,./-_*^``, lower-case, single -> double quotes."""
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def _norm(v: Any) -> Any:
    if isinstance(v, str):
        return normalize_string(v)
    if isinstance(v, list | tuple):
        return [_norm(x) for x in v]
    return v


def _answer_type(accepted: list[Any]) -> type | None:
    for a in accepted:
        if a != "":
            return type(a)
    return None


def _type_ok(value: Any, expected: type, accepted: Any, item_type: type | None) -> tuple[bool, bool]:
    """Return ``(valid, is_variable)`` following BFCL's type rules."""
    ans_t = _answer_type(accepted)
    is_variable = ans_t is not None and ans_t is not expected
    if type(value) is expected:
        if item_type is None:
            return True, is_variable
        items: Any = value
        for acc in accepted:  # BFCL: a non-list accepted value (e.g. "") does not constrain the items
            if not isinstance(acc, list) or all(_type_ok(x, item_type, acc, None)[0] for x in items):
                return True, is_variable
        return False, False  # nested type check failed
    if ans_t is not None and type(value) is ans_t:
        return True, True
    return False, False


def _dict_ok(value: dict[str, Any], accepted: list[Any]) -> bool:
    for acc in accepted:
        if acc == "" or not isinstance(acc, dict):
            continue
        ok = True
        for k, v in value.items():
            if k not in acc or _norm(v) not in [_norm(x) for x in acc[k]]:
                ok = False
                break
        if ok and all(k in value or "" in vals for k, vals in acc.items()):
            return True
    return False


def check_call(
    func: dict[str, Any], call: tuple[str, dict[str, Any]], expected: dict[str, dict[str, list[Any]]]
) -> CheckResult:
    """Check one ``(name, arguments)`` call against one ground-truth entry ``{name: {param: [accepted]}}``.

    Args:
        func: the BFCL function declaration of the expected function (``name``, ``parameters``).
        call: the model's call.
        expected: the ground-truth entry (one key).
    """
    exp_name, answers = next(iter(expected.items()))
    name, args = call
    if name != exp_name:
        return CheckResult(False, f"function name {name!r} != expected {exp_name!r}", "wrong_func_name")
    params = func.get("parameters", {})
    props: dict[str, Any] = params.get("properties", {})
    for r in params.get("required", []):
        if r not in args:
            return CheckResult(False, f"missing required parameter {r!r}", "missing_required")
    for p, value in args.items():
        if p not in props or p not in answers:
            return CheckResult(False, f"unexpected parameter {p!r}", "unexpected_param")
        type_desc = props[p].get("type", "any")
        expected_t = _PY_TYPES.get(type_desc, str)
        item_t = None
        if type_desc in ("array", "tuple"):
            item_t = _PY_TYPES.get((props[p].get("items") or {}).get("type", "any"), str)
        if isinstance(value, tuple):
            value = list(value)
        if expected_t is float and type(value) is int:
            value = float(value)
        accepted = answers[p]
        ok, is_var = _type_ok(value, expected_t, accepted, item_t)
        if not ok:
            return CheckResult(
                False, f"parameter {p!r}: type {type(value).__name__} is not {type_desc}", "type_error"
            )
        if not is_var:
            if expected_t is dict:
                if not _dict_ok(value, accepted):
                    return CheckResult(False, f"parameter {p!r}: {value!r} not accepted", "value_error:dict")
                continue
            if expected_t is list and item_t is dict:
                if not any(
                    isinstance(acc, list)
                    and len(acc) == len(value)
                    and all(_dict_ok(v, [a]) for v, a in zip(value, acc, strict=True))
                    for acc in accepted
                ):
                    return CheckResult(
                        False, f"parameter {p!r}: {value!r} not accepted", "value_error:list_dict"
                    )
                continue
            if expected_t is str:
                if normalize_string(value) not in [
                    normalize_string(a) for a in accepted if isinstance(a, str)
                ]:
                    return CheckResult(
                        False, f"parameter {p!r}: {value!r} not in {accepted!r}", "value_error:string"
                    )
                continue
            if expected_t is list:
                if _norm(value) not in [_norm(a) for a in accepted if isinstance(a, list)]:
                    return CheckResult(
                        False, f"parameter {p!r}: {value!r} not in {accepted!r}", "value_error:list"
                    )
                continue
        if value not in accepted:
            return CheckResult(False, f"parameter {p!r}: {value!r} not in {accepted!r}", "value_error:others")
    for p, vals in answers.items():
        if p not in args and "" not in vals:
            return CheckResult(False, f"parameter {p!r} missing and not optional", "missing_optional")
    return CheckResult(True)


def _find_func(functions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for f in functions:
        if f["name"] == name:
            return f
    return {"name": name, "parameters": {"properties": {}, "required": []}}


def check_output(
    category: str,
    functions: list[dict[str, Any]],
    calls: list[tuple[str, dict[str, Any]]],
    ground_truth: list[dict[str, dict[str, list[Any]]]] | None,
) -> CheckResult:
    """Score one question's output calls.

    Args:
        category: BFCL category (``simple_python``, ``multiple``, ``parallel``, ``parallel_multiple``, or any
            name when ``ground_truth`` is ``None`` = irrelevance).
        functions: BFCL function declarations of the question.
        calls: the model's calls ``[(name, arguments)]`` in output order.
        ground_truth: expected calls, or ``None`` for irrelevance scoring.
    """
    if ground_truth is None:
        return CheckResult(
            not calls, "" if not calls else f"{len(calls)} call(s) made", "" if not calls else "irrelevance"
        )
    if len(calls) != len(ground_truth):
        return CheckResult(
            False, f"wrong number of calls: {len(calls)} != {len(ground_truth)}", "wrong_count"
        )
    if "parallel" in category:
        used: set[int] = set()
        for exp in ground_truth:
            func = _find_func(functions, next(iter(exp)))
            last = CheckResult(False, "no output call", "cannot_find_match")
            for i, c in enumerate(calls):
                if i in used:
                    continue
                last = check_call(func, c, exp)
                if last.valid:
                    used.add(i)
                    break
            if not last.valid:
                return CheckResult(
                    False, f"no output call matches {next(iter(exp))!r}: {last.error}", "cannot_find_match"
                )
        return CheckResult(True)
    exp = ground_truth[0]
    return check_call(_find_func(functions, next(iter(exp))), calls[0], exp)


# --------------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------------


#: BFCL's type names and their JSON Schema types (``any``: no type constraint).
BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer"}


def to_json_schema(s: Any) -> Any:
    """BFCL's schema dialect as JSON Schema, recursively: the types of :data:`BFCL_TYPES` (also inside a list of
    types), ``any`` dropped (no type constraint), the ``optional`` flags dropped; other keys kept."""
    if isinstance(s, list):
        return [to_json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: to_json_schema(v) for k, v in s.items() if not (k == "optional" and isinstance(v, bool))}
    t = out.get("type")
    if isinstance(t, list):
        t = [BFCL_TYPES.get(x, x) if isinstance(x, str) else x for x in t]
        out["type"] = t
        if "any" in t:
            out.pop("type")
    elif t == "any":
        out.pop("type")
    elif isinstance(t, str):
        out["type"] = BFCL_TYPES.get(t, t)
    return out


def to_openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function declarations -> OpenAI-style tools with JSON Schema parameters."""
    return [
        {
            "type": "function",
            "function": {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": to_json_schema(f.get("parameters", {"type": "dict"})),
            },
        }
        for f in functions
    ]


def read_jsonl(path: Path, keys: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Read one JSON object per line (BFCL's ``.json`` files; a ``.gz`` name is decompressed), each holding
    ``keys``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the file and line of a malformed line, of a line that is not an object with
            ``keys``, or a corrupt ``.gz`` file.
    """
    rows = []
    if path.suffix == ".gz":
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, EOFError) as e:
            raise ValueError(f"{path}: not a gzip file ({e})") from e
    else:
        text = path.read_text(encoding="utf-8")
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not JSON ({e.msg})") from e
        missing = [k for k in keys if k not in row] if isinstance(row, dict) else list(keys)
        if missing:
            raise ValueError(
                f"{path}:{i}: a BFCL row is a JSON object with {', '.join(keys)}; missing {missing[0]!r}"
            )
        rows.append(row)
    return rows


def _plain_or_gz(path: Path) -> Path:
    """``path`` if it exists, else ``path`` + ``.gz`` if that exists, else ``path`` (reading it names it)."""
    if path.exists():
        return path
    gz = path.with_name(path.name + ".gz")
    return gz if gz.exists() else path


def load_category(
    category: str | None = None,
    *,
    data: Path | None = None,
    answers: Path | None = None,
    bfcl_dir: Path = DEFAULT_BFCL_DIR,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]] | None]:
    """Load questions and (optionally) answers.

    With ``category`` and no ``data``: ``bfcl_dir/BFCL_v4_{category}.json`` and
    ``bfcl_dir/possible_answer/BFCL_v4_{category}.json`` (or the same names with ``.gz``, as shipped in
    :data:`DEFAULT_BFCL_DIR`). With ``data`` and no ``answers``: irrelevance scoring (answers ``None``).

    Raises:
        ValueError: for an unknown category without ``data``, a row without the keys BFCL gives it (questions:
            ``id``, ``question``, ``function``; answers: ``id``, ``ground_truth``; file and line named), or an
            answers file missing ids of the questions.
        FileNotFoundError: for missing files.
    """
    if data is None:
        if category not in CATEGORIES:
            raise ValueError(
                f"unknown BFCL category {category!r}; choose one of {', '.join(CATEGORIES)} or pass --data"
            )
        data = _plain_or_gz(bfcl_dir / f"BFCL_v4_{category}.json")
        answers = _plain_or_gz(bfcl_dir / "possible_answer" / f"BFCL_v4_{category}.json")
    questions = read_jsonl(data, ("id", "question", "function"))
    if answers is None:
        return questions, None
    gt = {r["id"]: r["ground_truth"] for r in read_jsonl(answers, ("id", "ground_truth"))}
    missing = [q["id"] for q in questions if q["id"] not in gt]
    if missing:
        raise ValueError(f"{answers}: no ground truth for {len(missing)} question(s), e.g. {missing[0]!r}")
    return questions, gt


# --------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------


@dataclass
class EvalReport:
    """Aggregate of one BFCL run. ``parse_rate``: fraction of outputs that parsed into well-formed calls (or,
    when no call was expected, a prose answer); latencies in seconds."""

    category: str
    n: int
    accuracy: float
    parse_rate: float
    mean_latency_s: float
    results: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON object printed by ``agentkit eval bfcl --json``."""
        return {
            "category": self.category,
            "n": self.n,
            "accuracy": self.accuracy,
            "parse_rate": self.parse_rate,
            "mean_latency_s": self.mean_latency_s,
            "results": self.results,
        }


#: ``chat(messages, tools) -> (calls, parsed_ok, raw_text)``.
ChatFn = Callable[
    [list[dict[str, Any]], list[dict[str, Any]]], tuple[list[tuple[str, dict[str, Any]]], bool, str]
]


def evaluate(
    category: str,
    questions: list[dict[str, Any]],
    ground_truth: dict[str, list[dict[str, Any]]] | None,
    chat: ChatFn,
    *,
    limit: int | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> EvalReport:
    """Run ``chat`` on each question (first turn) and score it with :func:`check_output`.

    Args:
        category: label for the report (and ``parallel`` in it selects order-free matching).
        questions: BFCL question rows.
        ground_truth: ``id -> ground_truth`` or ``None`` for irrelevance scoring.
        chat: generation function (see :data:`ChatFn`).
        limit: score only the first ``limit`` questions.
        on_result: callback per question (progress display).
    """
    rows = questions[:limit] if limit else questions
    results = []
    for q in rows:
        turns = q["question"]
        messages = turns[0] if turns and isinstance(turns[0], list) else turns
        tools = to_openai_tools(q["function"])
        t0 = time.perf_counter()
        calls, parsed, raw = chat(messages, tools)
        dt = time.perf_counter() - t0
        gt = ground_truth[q["id"]] if ground_truth is not None else None
        res = (
            check_output(category, q["function"], calls, gt)
            if parsed
            else CheckResult(False, "unparsable output", "parse_error")
        )
        r = {
            "id": q["id"],
            "correct": res.valid,
            "parsed": parsed,
            "latency_s": dt,
            "error": res.error,
            "error_type": res.error_type,
            "calls": [{"name": n, "arguments": a} for n, a in calls],
            "raw": raw,
        }
        results.append(r)
        if on_result:
            on_result(r)
    n = len(results)
    return EvalReport(
        category=category,
        n=n,
        accuracy=sum(r["correct"] for r in results) / n if n else 0.0,
        parse_rate=sum(r["parsed"] for r in results) / n if n else 0.0,
        mean_latency_s=sum(r["latency_s"] for r in results) / n if n else 0.0,
        results=results,
    )
