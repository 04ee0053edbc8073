"""agentkit's sibling top-level packages (``model``, ``tools``...), and the check that no module of the user's
hides one of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: The top-level packages installed beside agentkit (pyproject.toml's packages).
SIBLING_PACKAGES = ("model", "grammar", "schema", "dg_kernels", "tools", "sandbox", "evals")
#: Those every agent run imports (``sandbox`` and ``evals`` only load for sandbox tools and ``agentkit eval``).
RUN_PACKAGES = ("model", "grammar", "schema", "dg_kernels", "tools")


def check_sibling_packages() -> None:
    """Raise ``ImportError`` naming the file when a module found first on ``sys.path`` (a user's ``tools.py`` or
    ``model.py`` beside the script run, or in the current folder under ``python -m``) hides one of
    :data:`RUN_PACKAGES`; agentkit's own imports would otherwise fail with ``'tools' is not a package``."""
    root = Path(__file__).resolve().parent.parent
    for name in RUN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)  # locates, does not import
        except ValueError:  # a module in sys.modules without a spec
            continue
        if spec is None or spec.origin is None or Path(spec.origin).resolve() == root / name / "__init__.py":
            continue
        raise ImportError(
            f"agentkit's package {name!r} is hidden by {spec.origin}, found first on sys.path (the folder of the "
            f"script you run, or the current folder with python -m): rename it, e.g. to my_{name}.py"
        )
