"""The package's shape (issue 14; docs/architecture.md "Layout"): a config is data and validating it needs no
torch, and the modules form layers that import only downwards, with no import cycles.

Layers, lowest first (a module may import its own layer or a lower one, never a higher one):

0. foundation: the package itself, ``errors``, ``atomic``, ``registry``, ``compute``, ``device``, ``timing``
1. data: ``config``, ``schema`` (the registries' parameter schemas), ``presets``, ``curves/`` (never torch)
2. tensors: ``algo/`` (pure functions on tensors) and ``rollout`` (the batch of rollouts every layer above reads)
3. ``models/``, ``tasks/``
4. ``engines/``: generation around a model, which owns its construction
5. training: ``trainer`` (the step: its forward, loss, update and non-finite guard) and ``fsdp`` (its sharding
   over ranks); a leaf under the driver, which it never imports
6. run machinery: ``build``, ``pipeline/`` (the driver: generation, batch preparation, the step loop),
   ``evaluate``, ``forecast``, ``runlog``, ``progress``, ``runs``, ``export``, ``runcard``
7. front ends: ``experiments/``, ``integrations/``, ``commands/``, ``cli``, ``api``, ``__main__``

Imports are read with ``ast`` from every file, function-level and ``TYPE_CHECKING`` ones included.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scalerl"

LAYERS: list[tuple[str, ...]] = [
    (
        "scalerl", "scalerl.errors", "scalerl.atomic", "scalerl.registry", "scalerl.compute", "scalerl.device",
        "scalerl.timing",
    ),
    ("scalerl.config", "scalerl.schema", "scalerl.presets", "scalerl.curves"),
    ("scalerl.algo", "scalerl.rollout"),
    ("scalerl.models", "scalerl.tasks"),
    ("scalerl.engines",),
    ("scalerl.trainer", "scalerl.fsdp"),
    (
        "scalerl.build", "scalerl.pipeline", "scalerl.evaluate", "scalerl.forecast", "scalerl.runlog",
        "scalerl.progress", "scalerl.runs", "scalerl.export", "scalerl.runcard",
    ),
    (
        "scalerl.experiments", "scalerl.integrations", "scalerl.commands", "scalerl.cli", "scalerl.api",
        "scalerl.__main__",
    ),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every scalerl module ``name`` imports, anywhere in the file (resolved to a module of the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``from scalerl.algo import losses`` imports the submodule; ``from scalerl.algo import X`` the package
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target.startswith("scalerl") and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    best, level = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    assert level is not None, f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md's Layout)"
    return level


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


def test_no_upward_imports():
    upward = sorted(
        f"{src} (layer {_layer(src)}) -> {dst} (layer {_layer(dst)})"
        for src, dsts in GRAPH.items()
        for dst in dsts
        if _layer(dst) > _layer(src)
    )
    assert upward == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    # a package importing its own submodules (``algo/__init__`` re-exporting ``algo.losses``) is no cycle:
    # the submodule's implicit import of its package is not an edge here
    assert _cycles(GRAPH) == []


_CHECK = """
import json, sys
from scalerl.config import config_from_run_dir, load_config, preset_names
from scalerl.errors import UserError
from scalerl.presets import LOO_COMPONENTS, resolve_variant
for name in preset_names():
    load_config(name)
for name in LOO_COMPONENTS:
    try:
        resolve_variant(name)
    except UserError:  # a variant that changes nothing on the base: still checked, still torch-free
        pass
load_config("scalerl", None, ["algo.loss.name=dapo", "algo.length.name=length_penalty", "engine=vllm"])
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "scalerl.algo",
    "scalerl.engines", "scalerl.pipeline", "scalerl.models")))))
"""


def test_loading_every_preset_imports_no_torch():
    out = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("bad", ["algo.loss.params.eps_max=-1", "algo.length.params.think_hi=1", "algo.loss.name=nope"])
def test_validating_a_bad_config_imports_no_torch(bad):
    code = (
        "import json, sys\nfrom scalerl.config import load_config\nfrom scalerl.errors import UserError\n"
        f"try:\n    load_config('scalerl', None, [{bad!r}])\nexcept UserError as e:\n    print(e)\n"
        "print(json.dumps('torch' in sys.modules or 'scalerl.algo' in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("invalid config") and bad.split("=")[0] in lines[0]
    assert lines[-1] == "false"


def test_schema_names_are_the_registries_names():
    """The torch-free schemas (scalerl/schema.py) and the registries hold the same entries."""
    from scalerl import algo, schema
    from scalerl.engines.registry import ENGINES
    from scalerl.pipeline.schedules import SCHEDULES

    registries = {
        "loss": algo.LOSSES, "curriculum": algo.CURRICULA, "length control": algo.LENGTH_CONTROLS,
        "aggregation": algo.AGGREGATIONS, "advantage normalisation": algo.ADVANTAGE_NORMS,
        "schedule": SCHEDULES, "engine": ENGINES,
    }
    for kind, registry in registries.items():
        assert registry.kind == kind
        assert registry.names() == sorted(schema.PARAMS.get(kind) or schema.NAMES[kind]), kind
    from typing import get_args

    from scalerl.config import RunConfig
    from scalerl.pipeline.backends import BACKENDS

    assert BACKENDS.names() == sorted(get_args(RunConfig.model_fields["backend"].annotation))


def test_schema_defaults_build_the_registered_defaults():
    """Each entry built from its schema's defaults equals the implementation built with no arguments."""
    from scalerl import algo, schema

    for name in schema.PARAMS["loss"]:
        assert algo.build_loss(type("C", (), {"name": name, "params": {}})) == algo.LOSSES.get(name)()
    for name in schema.PARAMS["length control"]:
        built = algo.build_length_control(type("C", (), {"name": name, "params": {}}))
        assert built == algo.LENGTH_CONTROLS.get(name)()


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_non_finite_parameter_is_a_one_line_error_naming_it(value):
    from scalerl.config import build_config
    from scalerl.errors import UserError

    with pytest.raises(UserError, match=r"algo\.length\.params\.think_lo: must be an integer"):
        build_config({"algo": {"length": {"name": "interruption", "params": {"think_lo": value}}}})
