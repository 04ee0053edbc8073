"""Cost of an MCP tool call: one stdio MCP server's ``add(a, b)`` vs the same function as a local tool.

Both run through agentkit's tool path (``Tool.validate`` then ``Tool.acall``, what the planner does per call)
in one event loop: the local one is the plain sync function (run on agentkit's daemon thread pool), the MCP
one is the tool :class:`agentkit.mcp.MCPToolset` made from the server's listing (the request and its answer
cross the server's stdin/stdout through the official SDK). The server is this file run with ``--serve``
(the SDK's ``MCPServer``), started once behind agentkit's parent-death guard; start-up is not timed.

    extra per call = p50(MCP call) - p50(local call)

Usage::

    .venv/bin/python benchmarks/mcp_overhead.py [--quick] [--json] [--calls N]

Target: at most 2 ms more per call than the local tool.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, target

TARGET_EXTRA_MS = 2.0


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")
    server.tool(description="Add two integers.")(add)
    server.run("stdio")


async def timed(tl: Any, n: int) -> list[float]:
    from agentkit.tools import ToolContext

    out: list[float] = []
    ctx = ToolContext(tl.name, "c", 0)
    for i in range(n):
        t0 = time.perf_counter()
        value = await tl.acall(tl.validate({"a": i, "b": 1}), ctx)
        tl.serializer(value)
        out.append(time.perf_counter() - t0)
    return out


async def measure(n: int, warmup: int) -> dict[str, Any]:
    from agentkit.mcp import MCPToolset
    from agentkit.tools import Tool

    local = Tool(add)
    t0 = time.perf_counter()
    async with MCPToolset.stdio(sys.executable, [__file__, "--serve"], name="bench") as ts:
        start_s = time.perf_counter() - t0
        remote = ts.tools[0]
        await timed(local, warmup)
        await timed(remote, warmup)
        local_s: list[float] = []
        remote_s: list[float] = []
        for _ in range(5):  # interleaved blocks: both see the same machine load
            local_s += await timed(local, n // 5)
            remote_s += await timed(remote, n // 5)
    p50_local = statistics.median(local_s) * 1e3
    p50_mcp = statistics.median(remote_s) * 1e3
    return {
        "calls": len(remote_s),
        "server_start_s": round(start_s, 3),
        "local_p50_ms": round(p50_local, 4),
        "mcp_p50_ms": round(p50_mcp, 4),
        "mcp_p90_ms": round(statistics.quantiles(remote_s, n=10)[-1] * 1e3, 4),
        "extra_p50_ms": round(p50_mcp - p50_local, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="200 calls instead of 1,000")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve()
        return
    n = args.calls or (200 if args.quick else 1000)
    res = asyncio.run(measure(max(n, 5), 20 if args.quick else 50))
    report = {
        "benchmark": "mcp_overhead",
        **res,
        "targets": [target("mcp_extra_ms_per_call_p50", res["extra_p50_ms"], TARGET_EXTRA_MS, False)],
    }
    if not args.json:
        print(
            f"local tool p50 {res['local_p50_ms']:.3f} ms, MCP stdio tool p50 {res['mcp_p50_ms']:.3f} ms "
            f"(p90 {res['mcp_p90_ms']:.3f}), extra {res['extra_p50_ms']:.3f} ms over {res['calls']} calls"
        )
    emit(report, args.json)


if __name__ == "__main__":
    main()
