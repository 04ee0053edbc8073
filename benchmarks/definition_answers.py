"""Does the code-search bot's answer state the defining file and line? Held-out "where is X defined" questions.

Draws ``-n`` module-level functions and classes of this repository at random (``--sample-seed``), each a name
defined once in the source packages and used nowhere in ``tests/``, ``benchmarks/bot_questions.py`` or
``model/training/`` (so no test, tuned question or training example names it), asks the code-search bundle
``Where is the {kind} {name} defined?`` on the embedded checkpoint (1 thread by default, backend seed
``--seed``), and scores the final answer: right when it holds the definition's path and its line as a whole
number. The questions are drawn afresh from the tree, never stored, so nothing can be tuned on a fixed list.

Prints each question's call and answer, then the share right (target: 8 of 10, issue #41). ``--json``: one
JSON object with ``targets``.

Usage: ``python benchmarks/definition_answers.py [-n 10] [--sample-seed 0] [--seed 0] [--threads 1] [--json]``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit, target  # noqa: E402

#: Packages whose definitions are asked about.
SOURCE_DIRS = ("agentkit", "model", "tools", "grammar", "schema", "sandbox", "dg_kernels", "evals")
#: Where a name counts as seen (a test, a tuned question, training data).
SEEN = ("tests", "benchmarks/bot_questions.py", "model/training")


def held_out_definitions(root: Path) -> list[Any]:
    """The repository's module-level functions and classes whose names are defined once in
    :data:`SOURCE_DIRS` and appear in no file under :data:`SEEN` (a ``tools.code_search`` ``Definition`` each,
    sorted by path and line)."""
    from tools.code_search.definitions import python_definitions
    from tools.code_search.repo import CodeRepo

    files = CodeRepo(root).files()
    seen_text = "\n".join(
        (root / f).read_text(errors="replace")
        for f in files
        if f.endswith(".py") and any(f == s or f.startswith(s + "/") for s in SEEN)
    )
    seen = set(re.findall(r"\w+", seen_text))
    defs = []
    for f in files:
        if f.endswith(".py") and f.split("/")[0] in SOURCE_DIRS and not f.startswith("model/training/"):
            defs.extend(python_definitions(f, (root / f).read_text(errors="replace")))
    count = Counter(d.name for d in defs)
    return [
        d
        for d in defs
        if d.kind in ("function", "class")
        and d.qualname == d.name
        and count[d.name] == 1
        and d.name not in seen
    ]


def states_location(answer: str | None, path: str, line: int) -> bool:
    """True when ``answer`` holds ``path`` and ``line`` as a whole number (``bundle_load.py:152`` or
    ``bundle_load.py at line 152``; not ``1520``)."""
    return bool(answer and path in answer and re.search(rf"(?<!\d){line}(?!\d)", answer))


def main(argv: list[str] | None = None) -> int:
    """Ask the drawn questions; print the transcript and the share right (or one JSON object)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10, help="questions to draw (default 10)")
    ap.add_argument("--sample-seed", type=int, default=0, help="which definitions are drawn")
    ap.add_argument("--seed", type=int, default=0, help="the backend's sampling seed")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    import torch

    from agentkit.backends import make_backend
    from agentkit.bundle import load_bundle
    from agentkit.errors import AgentRunError
    from tools import code_search

    torch.set_num_threads(a.threads)
    pool = held_out_definitions(ROOT)
    drawn = random.Random(a.sample_seed).sample(pool, min(a.n, len(pool)))
    backend = make_backend("embedded", a.checkpoint, seed=a.seed, threads=a.threads)
    rows: list[dict[str, Any]] = []
    code_search.set_root(ROOT)
    try:
        agent = load_bundle(ROOT / "examples" / "code_search" / "bundle.yaml").make_agent(backend=backend)
        for d in drawn:
            question = f"Where is the {d.kind} {d.name} defined?"
            try:
                r = agent.run(question)
            except AgentRunError as exc:  # a run that ended in an error keeps its result
                r = exc.result
            calls = [(c.name, c.arguments) for step in r.steps for c in step.tool_calls]
            rows.append(
                {
                    "question": question,
                    "truth": f"{d.path}:{d.line}",
                    "calls": calls,
                    "answer": r.answer,
                    "ok": states_location(r.answer, d.path, d.line),
                }
            )
    finally:
        code_search.set_root(None)
    rate = sum(r["ok"] for r in rows) / max(1, len(rows))
    report = {
        "checkpoint": a.checkpoint or "agentkit-tiny",
        "seed": a.seed,
        "sample_seed": a.sample_seed,
        "pool": len(pool),
        "n": len(rows),
        "rate": rate,
        "rows": rows,
        "targets": [target("held-out definitions: answer states file and line", rate, 0.8, True)],
    }
    if not a.json:
        for r in rows:
            mark = "ok" if r["ok"] else "WRONG"
            print(f"{r['question']}  [{r['truth']}]\n    {r['calls'][:1]}\n    -> {r['answer']!r}  ({mark})")
        print(
            f"file and line stated: {sum(r['ok'] for r in rows)} of {len(rows)} (pool {len(pool)}, seed {a.seed})"
        )
    emit(report, a.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
