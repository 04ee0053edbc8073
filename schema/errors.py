"""The error every schema check raises."""

from __future__ import annotations


class SchemaError(ValueError):
    """An unsupported keyword or an unsatisfiable schema, found at tool registration: ``keyword`` is the keyword
    at fault (``"not"``, ``"$ref"``...), ``path`` the JSON pointer of the schema holding it, relative to the tool's
    ``parameters`` (``""``: the root), ``message`` the problem in words."""

    def __init__(self, keyword: str, path: str, message: str) -> None:
        self.keyword = keyword
        self.path = path
        self.message = message
        super().__init__(f"{message} (keyword {keyword!r} at {path or '/'})")
