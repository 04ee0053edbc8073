"""The error every schema check raises."""

from __future__ import annotations


class SchemaError(ValueError):
    """An unsupported keyword or an unsatisfiable schema, found at tool registration.

    Attributes:
        keyword: the JSON Schema keyword at fault (e.g. ``"not"``, ``"minimum"``, ``"$ref"``).
        path: JSON pointer of the schema holding it, relative to the tool's ``parameters``
            (``""`` is the root, e.g. ``"/properties/a/items"``).
    """

    def __init__(self, keyword: str, path: str, message: str) -> None:
        self.keyword = keyword
        self.path = path
        where = path or "/"
        super().__init__(f"{message} (keyword {keyword!r} at {where})")
