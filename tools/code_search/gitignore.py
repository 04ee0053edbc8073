"""``.gitignore`` matching for a walk outside a git work tree (gitignore(5) as ``pathspec`` implements it)."""

from __future__ import annotations

from pathlib import Path

import pathspec


class GitIgnore:
    """A matcher for the ``.gitignore`` files of a tree, added per directory: as in git, the last matching
    rule wins and a deeper ``.gitignore`` comes later (the walk never enters an ignored directory)."""

    def __init__(self) -> None:
        self.specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []

    def add_lines(self, lines: list[str], base: str = "") -> None:
        """Add the rules of one ``.gitignore`` whose directory is ``base`` (relative, POSIX, "" = root)."""
        self.specs.append((base, pathspec.GitIgnoreSpec.from_lines(lines)))

    def add_file(self, path: Path, base: str = "") -> None:
        """Read a ``.gitignore`` file (undecodable bytes replaced) and add its rules under ``base``."""
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        self.add_lines(text.splitlines(), base)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether the path ``rel`` (relative to the root, POSIX) is ignored."""
        result = False
        for base, spec in self.specs:
            if base and not rel.startswith(base + "/"):
                continue
            sub = rel[len(base) + 1 :] if base else rel
            include = spec.check_file(sub + "/" if is_dir else sub).include
            if include is not None:
                result = include
        return result
