"""Framework overhead per tool round trip: agentkit vs pydantic-ai, same loop, no model time.

Both frameworks run the same conversation: a deterministic model function (agentkit ``ScriptedBackend`` with
a function, pydantic-ai ``FunctionModel``) requests one call of a trivial tool ``add(a, b)`` per turn, N times,
then answers. The tool is a plain sync function in both (both run sync tools on worker threads). What is
timed is everything except the model function and the tool body, which cost the same in both: message
building, argument validation, tool dispatch, result serialisation, bookkeeping.

    overhead per round trip = (median run time with N calls - median run time with 0 calls) / N

The two frameworks are measured interleaved in one process so they share the machine's load.

Usage::

    .venv/bin/python benchmarks/agent_overhead.py [--quick] [--json] [--round-trips N] [--repeats R]

Target: agentkit's overhead per round trip <= 0.5x pydantic-ai's.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, target

TARGET_RATIO = 0.5


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def make_agentkit(n_calls: list[int], is_async: bool) -> Callable[[], object]:
    from agentkit import Agent, tool
    from agentkit.backends.base import ModelTurn, ToolCallRequest
    from agentkit.backends.scripted import ScriptedBackend

    state = {"i": 0}

    def model(messages: list[Any], tools: list[Any], tool_choice: Any) -> ModelTurn:
        i = state["i"]
        if i < n_calls[0]:
            state["i"] = i + 1
            return ModelTurn(tool_calls=[ToolCallRequest(f"c{i}", "add", {"a": i, "b": 1})])
        state["i"] = 0
        return ModelTurn(text="done")

    t = tool(name="add")(add_async if is_async else add)
    agent = Agent(ScriptedBackend(model, record=False), [t], max_steps=10_000, loop_guard=None)

    def run() -> object:
        r = agent.run("go")
        assert r.answer == "done", r.answer
        return r

    return run


def make_pydantic_ai(n_calls: list[int], is_async: bool) -> Callable[[], object]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    state = {"i": 0}

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        i = state["i"]
        if i < n_calls[0]:
            state["i"] = i + 1
            return ModelResponse(
                parts=[ToolCallPart(tool_name="add", args={"a": i, "b": 1}, tool_call_id=f"c{i}")]
            )
        state["i"] = 0
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model))
    agent.tool_plain(name="add")(add_async if is_async else add)
    limits = UsageLimits(request_limit=None)  # its default stops at 50 requests

    def run() -> object:
        r = agent.run_sync("go", usage_limits=limits)
        assert r.output == "done", r.output
        return r

    return run


def measure(n: int, repeats: int, is_async: bool) -> dict[str, float]:
    """Median seconds per run with 0 and ``n`` tool round trips, for both frameworks (interleaved)."""
    n_calls = [0]
    runners = {
        "agentkit": make_agentkit(n_calls, is_async),
        "pydantic_ai": make_pydantic_ai(n_calls, is_async),
    }
    times: dict[tuple[str, int], list[float]] = {(k, c): [] for k in runners for c in (0, n)}
    for fn in runners.values():  # warm-up: imports, caches, thread pools
        for c in (0, n):
            n_calls[0] = c
            fn()
    gc.collect()
    for _ in range(repeats):
        for c in (0, n):
            n_calls[0] = c
            for name, fn in runners.items():
                t0 = time.perf_counter()
                fn()
                times[(name, c)].append(time.perf_counter() - t0)
    out: dict[str, float] = {}
    for name in runners:
        t0 = statistics.median(times[(name, 0)])
        tn = statistics.median(times[(name, n)])
        out[f"{name}_run_us"] = t0 * 1e6
        out[f"{name}_round_trip_us"] = (tn - t0) / n * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer round trips and repeats (~10 s)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--round-trips", type=int, default=None, help="tool round trips per run (default 50, quick 20)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="timed runs per configuration (default 30, quick 10)"
    )
    args = ap.parse_args(argv)
    n = args.round_trips or (20 if args.quick else 50)
    repeats = args.repeats or (10 if args.quick else 30)
    try:
        import pydantic_ai  # noqa: F401
    except ImportError:
        print("pydantic-ai is not installed: pip install -e '.[dev]' (pydantic-ai-slim)", file=sys.stderr)
        return 2
    sync = measure(n, repeats, is_async=False)
    asy = measure(n, repeats, is_async=True)
    ratio = sync["agentkit_round_trip_us"] / sync["pydantic_ai_round_trip_us"]
    ratio_async = asy["agentkit_round_trip_us"] / asy["pydantic_ai_round_trip_us"]
    result = {
        "benchmark": "agent_overhead",
        "round_trips": n,
        "repeats": repeats,
        "sync_tool": sync,
        "async_tool": asy,
        "ratio_sync": ratio,
        "ratio_async": ratio_async,
        "targets": [
            target("overhead_per_round_trip_ratio_vs_pydantic_ai", round(ratio, 4), TARGET_RATIO, False),
            target(
                "overhead_per_round_trip_ratio_vs_pydantic_ai_async_tool",
                round(ratio_async, 4),
                TARGET_RATIO,
                False,
            ),
        ],
    }
    if args.json:
        emit(result, True)
        return 0
    print(f"framework overhead, {n} tool round trips per run, median of {repeats} runs (microseconds)")
    print(f"{'':28s}{'agentkit':>12s}{'pydantic-ai':>14s}{'ratio':>8s}")
    for label, d in (("sync tool", sync), ("async tool", asy)):
        rt_a, rt_p = d["agentkit_round_trip_us"], d["pydantic_ai_round_trip_us"]
        run_a, run_p = d["agentkit_run_us"], d["pydantic_ai_run_us"]
        print(f"{label + ', per round trip':28s}{rt_a:12.1f}{rt_p:14.1f}{rt_a / rt_p:8.3f}")
        print(f"{label + ', per run (0 calls)':28s}{run_a:12.1f}{run_p:14.1f}{run_a / run_p:8.3f}")
    emit(result, False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
