"""Plain data across the grader's process boundary (App. A.3 code grading; docs/tasks.md "Sandbox").

The solution and its tests run in two sandboxes that exchange only text lines: one Python literal each, built
from exact ``None``/``bool``/``int``/``float``/``complex``/``str``/``bytes`` and ``list``/``tuple``/``dict``/
``set``/``frozenset`` of them. ``decode`` builds fresh plain objects from the text, so whatever the solution's
objects claim (an ``__eq__`` that is always true, a subclass of ``int``), the tests compare real values.

This file runs inside both sandboxes (copied in as ``_wire.py``, imported with the standard library only).
"""

from __future__ import annotations

import ast
import math
from typing import Any

MAX_DEPTH = 200
_FLOATS = {"nan": "float('nan')", "inf": "float('inf')", "-inf": "float('-inf')"}


def encode(value: Any, depth: int = 0) -> str:
    """``value`` as a Python literal; TypeError for anything that is not plain data (subclasses included)."""
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str, bytes):
        return repr(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else _FLOATS[repr(value)]
    if kind is complex:
        return f"complex({encode(value.real)}, {encode(value.imag)})"
    if kind in (list, tuple, set, frozenset):
        items = ", ".join(encode(item, depth + 1) for item in value)
        if kind is list:
            return f"[{items}]"
        if kind is tuple:
            return f"({items},)" if len(value) == 1 else f"({items})"
        if kind is set:
            return f"{{{items}}}" if value else "set()"
        return f"frozenset({{{items}}})" if value else "frozenset()"
    if kind is dict:
        return "{" + ", ".join(f"{encode(k, depth + 1)}: {encode(v, depth + 1)}" for k, v in value.items()) + "}"
    raise TypeError(f"a {kind.__qualname__} is not plain data (None, bool, int, float, complex, str, bytes, and "
                    "lists, tuples, dicts and sets of them)")


def decode(text: str) -> Any:
    """The plain value a line from ``encode`` stands for; ValueError for anything else."""
    return _build(ast.parse(text.strip(), mode="eval").body, 0)


def _build(node: ast.AST, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) in (type(None), bool, int, float, complex, str, bytes):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _build(node.operand, depth + 1)
        if type(operand) in (int, float, complex):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):  # complex literals: 1+2j
        left, right = _build(node.left, depth + 1), _build(node.right, depth + 1)
        if type(left) in (int, float) and type(right) is complex:
            return left + right if isinstance(node.op, ast.Add) else left - right
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_build(item, depth + 1) for item in node.elts]
        return items if isinstance(node, ast.List) else tuple(items) if isinstance(node, ast.Tuple) else set(items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_build(k, depth + 1): _build(v, depth + 1) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_build(arg, depth + 1) for arg in node.args]
        if node.func.id == "float" and len(args) == 1 and args[0] in ("nan", "inf", "-inf"):
            return float(args[0])
        if node.func.id == "complex" and len(args) == 2 and all(type(a) is float or type(a) is int for a in args):
            return complex(*args)
        if node.func.id in ("set", "frozenset") and len(args) <= 1 and all(type(a) in (set, list) for a in args):
            return set(*args) if node.func.id == "set" else frozenset(*args)
    raise ValueError(f"not plain data: {ast.dump(node)[:200]}")
