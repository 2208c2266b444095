"""Model files are never loaded with pickle: a static scan of vcamd/ with `ast` (comments and
strings do not count, aliases do).

A pickled "model" runs arbitrary code when loaded; ONNX files are plain protobuf. So in vcamd/:
no `pickle`/`cPickle`/`dill`/`cloudpickle`/`joblib`/`shelve` import, no `torch.load` without
`weights_only=True`, no `numpy.load(..., allow_pickle=True)`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "vcamd"
PICKLING_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def pickle_uses(source: str, filename: str = "<source>") -> list[str]:
    """Every place in `source` that can unpickle, as 'file:line: what'."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}  # local name -> dotted module/function it stands for
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
                if alias.name.split(".")[0] in PICKLING_MODULES:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            if node.module.split(".")[0] in PICKLING_MODULES:
                found.append(f"{filename}:{node.lineno}: from {node.module} import ...")

    def dotted(expr: ast.expr) -> str:
        if isinstance(expr, ast.Name):
            return aliases.get(expr.id, expr.id)
        if isinstance(expr, ast.Attribute):
            return f"{dotted(expr.value)}.{expr.attr}"
        return "?"

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        if name == "torch.load" and not _is_true(keywords.get("weights_only")):
            found.append(f"{filename}:{node.lineno}: torch.load without weights_only=True")
        if name in ("numpy.load", "np.load") and "allow_pickle" in keywords and not (
            isinstance(keywords["allow_pickle"], ast.Constant) and keywords["allow_pickle"].value is False
        ):
            found.append(f"{filename}:{node.lineno}: numpy.load(allow_pickle=...)")
        if name.split(".")[0] in PICKLING_MODULES:
            found.append(f"{filename}:{node.lineno}: {name}()")
    return found


def test_vcamd_never_unpickles() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 5, f"expected the vcamd package at {PACKAGE}"
    found = [hit for path in files for hit in pickle_uses(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))]
    assert not found, "pickle-capable loading in vcamd/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import pickle\npickle.load(open('m', 'rb'))\n", "import pickle"),
        ("import pickle as p\np.loads(b'')\n", "pickle.loads()"),
        ("from joblib import load\nload('m')\n", "from joblib"),
        ("import torch\ntorch.load('m.pth')\n", "torch.load without"),
        ("import torch as t\nt.load('m.pth', weights_only=False)\n", "torch.load without"),
        ("from torch import load\nload('m.pth')\n", "torch.load without"),
        ("import numpy as np\nnp.load('e.npy', allow_pickle=True)\n", "allow_pickle"),
        ("import numpy\nnumpy.load('e.npy', allow_pickle=flag)\n", "allow_pickle"),
    ],
)
def test_scanner_catches_each_form(source: str, expected: str) -> None:
    hits = pickle_uses(source)
    assert any(expected in hit for hit in hits), hits


@pytest.mark.parametrize(
    "source",
    [
        "# import pickle\n'''torch.load(x)'''\n",  # comments and strings do not count
        "import torch\ntorch.load('m.pth', weights_only=True)\n",
        "import numpy as np\nnp.load('e.npy')\nnp.load('e.npy', allow_pickle=False)\n",
        "import onnx\nonnx.load('m.onnx')\n",
    ],
)
def test_scanner_allows_safe_forms(source: str) -> None:
    assert pickle_uses(source) == []
