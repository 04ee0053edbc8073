"""A small MCP server of notes, written with the official SDK's ``MCPServer`` (run over stdio).

Notes live in memory, or in the JSON file named by ``$NOTES_FILE`` when it is set (so they survive restarts).
Run it alone with ``python examples/mcp/notes_server.py``; the bundle beside it starts it for an agent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes", instructions="Keep short notes by title.")
_FILE = Path(os.environ["NOTES_FILE"]) if os.environ.get("NOTES_FILE") else None
_NOTES: dict[str, str] = {"groceries": "milk, eggs, bread"}


def _load() -> dict[str, str]:
    if _FILE is not None and _FILE.is_file():
        return dict(json.loads(_FILE.read_text(encoding="utf-8")))
    return _NOTES


def _save(notes: dict[str, str]) -> None:
    if _FILE is not None:
        _FILE.write_text(json.dumps(notes, ensure_ascii=False, indent=2), encoding="utf-8")


@server.tool(description="Save a note under a title.")
def add_note(title: str, text: str) -> str:
    """Save a note under a title (replacing any note of that title).

    Args:
        title: Short title of the note, e.g. "groceries".
        text: The note's text.
    """
    notes = _load()
    notes[title] = text
    _save(notes)
    return f"saved note {title!r}"


@server.tool(description="Read the note with this title.")
def read_note(title: str) -> str:
    """Read the note with this title.

    Args:
        title: Title of the note.
    """
    notes = _load()
    if title not in notes:
        # ToolError: the client sees this text (any other exception reaches it as "Error executing tool ...")
        raise ToolError(f"no note titled {title!r}; titles: {', '.join(sorted(notes)) or 'none'}")
    return notes[title]


@server.tool(description="The titles of all notes.")
def list_notes() -> list[str]:
    """The titles of all notes."""
    return sorted(_load())


if __name__ == "__main__":
    server.run("stdio")
