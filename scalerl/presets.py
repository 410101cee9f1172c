"""Presets (``configs/*.yaml``, App. A.16) and the leave-one-out variants of ScaleRL (§4, Fig. 7, ICLR A.20).

Presets are data; this module only reads them. A leave-one-out (LOO) variant reverts one component of a base
recipe to the choice a prevalent recipe makes, and is expressed as ``--set`` overrides on the base:

==============  ===========================  ===============  ==========================================
variant         component                    taken from       what it means
==============  ===========================  ===============  ==========================================
loo-dapo        ``algo.loss``                dapo_qwen        DAPO loss with its clip instead of CISPO
loo-fp32        ``algo.fp32_head``           grpo_deepseek    no FP32 LM head (below)
loo-savg        ``algo.aggregation``         grpo_deepseek    sample-average loss aggregation
loo-plan        ``algo.advantages.norm``     grpo_deepseek    prompt-level advantage normalisation
loo-batch       ``algo.zero_variance_filter``  grpo_deepseek  no zero-variance filtering
loo-uniform     ``algo.curriculum``          grpo_deepseek    uniform sampling instead of NPR (A.20)
loo-lp          ``algo.length``              dapo_qwen        DAPO length penalty instead of interruptions,
                                                              at the base's generation budget (below)
loo-8op         ``schedule.name``            grpo_deepseek    PPO-off-policy instead of PipelineRL, same k
==============  ===========================  ===============  ==========================================

Taking the reverted value from a preset keeps each number in one place (the DAPO clip lives in dapo_qwen.yaml).
Every variant differs from its base in its component only (``tests/test_presets.py`` diffs the resolved
configs), so a difference between the two runs is the component's.

* ``loo-lp`` keeps the base's generation budget (App. A.10, Eq. 9: L_max = the 12k thinking + 2k answer budget,
  L_cache = the 2k answer budget): with interruptions at ``think_hi`` thinking tokens and ``answer_budget``
  after, the penalty gets ``l_max = think_hi + answer_budget``, ``l_cache = answer_budget`` and a hard cap of
  ``l_max`` (:func:`matched_budget`), not dapo_qwen's own 96-token cap, which would let it think twice as long.
* ``loo-fp32`` changes the head only. The FP32 head fixes a numeric mismatch between generator and trainer
  (§3.2, Fig. 5b) that exists only when they compute in low precision: the testbed generates and trains in float32
  (|log ρ| mean 1.3e-7 with or without the head), where the variant has nothing to fix and the two runs differ
  by noise. To test the head in the paper's precision regime, run the whole sweep in it, base included, with
  ``--set engine.bf16_autocast=true`` (|log ρ| mean 6.3e-3 without the head against 1.1e-3 with it,
  bench/fp32_head_mismatch.py): both arms then generate in bf16 and cost the same compute (bf16 autocast costs
  ~3.6x the generation CPU time on a CPU, which is why the default stays float32).
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from scalerl.config import RunConfig, load_config, preset_description, preset_names
from scalerl.errors import UserError

MISSING = "-"  # shown for a field one side does not set (e.g. a loss parameter the other loss lacks)

# LOO name -> (component path, preset the reverted value is taken from); see the module docstring.
LOO_COMPONENTS: dict[str, tuple[str, str]] = {
    "loo-dapo": ("algo.loss", "dapo_qwen"),
    "loo-fp32": ("algo.fp32_head", "grpo_deepseek"),
    "loo-savg": ("algo.aggregation", "grpo_deepseek"),
    "loo-plan": ("algo.advantages.norm", "grpo_deepseek"),
    "loo-batch": ("algo.zero_variance_filter", "grpo_deepseek"),
    "loo-uniform": ("algo.curriculum", "grpo_deepseek"),
    "loo-lp": ("algo.length", "dapo_qwen"),
    "loo-8op": ("schedule.name", "grpo_deepseek"),
}


def matched_budget(base_length: dict[str, Any], new_length: dict[str, Any]) -> dict[str, Any]:
    """``new_length`` (the length penalty of ``loo-lp``) at the generation budget of ``base_length``
    (interruptions): ``l_max`` = thinking + answer budget, ``l_cache`` = the answer budget, capped at ``l_max``
    (App. A.10, Eq. 9). Any other pair is returned unchanged."""
    if base_length.get("name") != "interruption" or new_length.get("name") != "length_penalty":
        return new_length
    base = base_length["params"]
    l_max = int(base["think_hi"]) + int(base["answer_budget"])
    params = {**new_length["params"], "l_max": l_max, "l_cache": int(base["answer_budget"]), "max_new_tokens": l_max}
    return {**new_length, "params": params}


# LOO name -> how the donor's value is fitted to the base (its budget), within the component
LOO_MATCH = {"loo-lp": matched_budget}


def list_presets() -> list[tuple[str, str]]:
    """(name, one-line description) of every preset in ``configs/``."""
    return [(name, preset_description(name)) for name in preset_names()]


def resolve_preset(name: str) -> RunConfig:
    return load_config(preset=name)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b.c": leaf}``; an empty mapping (e.g. ``params: {}``) has no leaves."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _key_union(a: Any, b: Any) -> Any:
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return None
    return {key: _key_union(a.get(key), b.get(key)) for key in {**a, **b}}


def _switched_sections(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Paths of registry sections (``{name, params}``) whose implementation differs between ``a`` and ``b``."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return []
    if "name" in a and "params" in a and a.get("name") != b.get("name"):
        return [prefix]
    out: list[str] = []
    for key in a.keys() & b.keys():
        out += _switched_sections(a[key], b[key], f"{prefix}.{key}" if prefix else key)
    return out


def config_diff(a: RunConfig, b: RunConfig) -> list[tuple[str, Any, Any]]:
    """(field path, value in ``a``, value in ``b``) for every field that differs, ``MISSING`` where one side
    does not set it. A registry section that switches implementation is one row holding both whole sections
    (the old params mean nothing to the new entry). ``name`` (the run's label) is not a recipe difference."""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    fa, fb = flatten(da), flatten(db)
    switched = _switched_sections(da, db)
    rows: list[tuple[str, Any, Any]] = []
    for path in flatten(_key_union(da, db)):  # the fields of both, each new one next to its siblings
        section = next((s for s in switched if path.startswith(s + ".")), None)
        if section is not None:
            if path == section + ".name":
                rows.append((section, _get(da, section), _get(db, section)))
        elif path != "name" and fa.get(path, MISSING) != fb.get(path, MISSING):
            rows.append((path, fa.get(path, MISSING), fb.get(path, MISSING)))
    return rows


def preset_diff(name: str, base: str = "scalerl") -> list[tuple[str, Any, Any]]:
    """How preset ``name`` differs from ``base``, computed from the two resolved configs."""
    return config_diff(resolve_preset(base), resolve_preset(name))


def _get(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


def format_value(value: Any) -> str:
    """A value as ``--set`` parses it back (YAML flow style, quoted only where needed)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=math.inf).strip()
    return text.removesuffix("...").strip()


def _component_overrides(path: str, new_value: Any) -> list[str]:
    """``--set`` items that put ``new_value`` at ``path``.

    A registry section switches to another implementation by name, which resets its params
    (``scalerl.config``), so setting the new section's leaves reproduces it exactly."""
    if isinstance(new_value, dict):
        return [f"{p}={format_value(v)}" for p, v in flatten(new_value, path).items()]
    return [f"{path}={format_value(new_value)}"]


def _reverts(base_value: Any, new_value: Any) -> bool:
    """Is ``new_value`` a different choice than ``base_value`` (for a registry section: another name)?"""
    if isinstance(base_value, dict) and isinstance(new_value, dict):
        return base_value.get("name") != new_value.get("name")
    return base_value != new_value


def loo_variants(base: str = "scalerl") -> dict[str, list[str]]:
    """LOO variant name -> ``--set`` overrides on preset ``base`` (§4, Fig. 7 + ICLR A.20).

    A variant whose component ``base`` already shares with the donor preset (e.g. ``loo-8op`` on a
    PPO-off-policy base) would change nothing and is left out."""
    base_data = resolve_preset(base).model_dump(mode="json")
    out: dict[str, list[str]] = {}
    donors: dict[str, dict[str, Any]] = {}
    for variant, (path, donor) in LOO_COMPONENTS.items():
        if donor not in donors:
            donors[donor] = resolve_preset(donor).model_dump(mode="json")
        old, new = _get(base_data, path), _get(donors[donor], path)
        if _reverts(old, new):
            match = LOO_MATCH.get(variant)
            out[variant] = _component_overrides(path, match(old, new) if match else new)
    return out


def resolve_variant(name: str, base: str = "scalerl") -> RunConfig:
    """A preset by name, or a LOO variant (``loo-*``) of ``base``, fully resolved and validated."""
    if name in LOO_COMPONENTS:
        variants = loo_variants(base)
        if name not in variants:
            raise UserError(f"{name} changes nothing on preset {base!r}: it already uses that choice")
        return load_config(preset=base, overrides=variants[name] + [f"name={name}"])
    if name in preset_names():
        return resolve_preset(name)
    choices = ", ".join(preset_names() + list(LOO_COMPONENTS))
    raise UserError(f"unknown preset or variant {name!r}; choose one of: {choices}")
