"""The run card: ``RUN/README.md``, written at the end of every run and by ``scalerl export`` into its folder.

Plain markdown that a person reads and a model hub renders: the recipe in the paper's names with the section
that introduces each component, the resolved config's differences from its preset, the compute spent, the
final validation and downstream pass rates, the fit of Eq. 1 (A with its interval, or the bound and why), the
forecast's trust signal when the fit carries one, and the command that reproduces the run. Everything is read
from the run directory (``config.yaml``, ``metrics.jsonl``, ``fit.json``); a file that is missing is said so.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Callable

from scalerl.atomic import write_text
from scalerl.config import RunConfig, config_from_run_dir, load_config, preset_names
from scalerl.evaluate import pass_rate_keys
from scalerl.forecast import describe_fit, describe_shape, describe_trust
from scalerl.presets import MISSING, _component_overrides, config_diff, format_value
from scalerl.runlog import read_metrics
from scalerl.schema import Params

CARD = "README.md"

LOSS_NAMES = {"cispo": "CISPO", "dapo": "DAPO", "gspo": "GSPO", "grpo": "GRPO", "ppo": "PPO (clipped)",
              "reinforce": "REINFORCE"}
SCHEDULE_NAMES = {"pipeline_rl": "PipelineRL", "ppo_off_policy": "PPO-off-policy"}
LENGTH_NAMES = {"interruption": "interruptions", "length_penalty": "length penalty",
                "none": "none"}
CURRICULUM_NAMES = {"npr": "No-Positive-Resampling", "uniform": "uniform sampling"}


def _params(params: Params) -> str:
    """The hyper-parameters the config set (the rest are the entry's defaults)."""
    values = params.model_dump(exclude_unset=True)
    return f" ({', '.join(f'{k} {format_value(v)}' for k, v in values.items())})" if values else ""


def _on(flag: bool) -> str:
    return "on" if flag else "off"


# (component, how this run sets it, the paper's section): the recipe as the paper names it (§4: ScaleRL)
RECIPE: list[tuple[str, Callable[[RunConfig], str], str]] = [
    ("Loss", lambda c: LOSS_NAMES.get(c.algo.loss.name, c.algo.loss.name) + _params(c.algo.loss.params),
     "§3.2, App. A.17"),
    ("Loss aggregation", lambda c: f"{c.algo.aggregation} average", "§3.2, Fig. 14a"),
    ("Advantage normalisation", lambda c: f"{c.algo.advantages.norm}-level" if c.algo.advantages.norm != "none"
     else "none", "§3.2, Fig. 14b"),
    ("Zero-variance filtering", lambda c: _on(c.algo.zero_variance_filter), "§3.2, Fig. 6a"),
    ("Prompt sampling", lambda c: CURRICULUM_NAMES.get(c.algo.curriculum.name, c.algo.curriculum.name)
     + _params(c.algo.curriculum.params), "§3.2, Fig. 6b"),
    ("Length control", lambda c: LENGTH_NAMES.get(c.algo.length.name, c.algo.length.name)
     + _params(c.algo.length.params), "§2, App. A.10"),
    ("FP32 LM head", lambda c: _on(c.algo.fp32_head), "§3.2, Fig. 5b"),
    ("Truncated samples", lambda c: {"exclude": "left out of the loss"}.get(c.algo.truncated, "trained on as incorrect"),
     "App. A.6, A.15"),
    ("Off-policy schedule", lambda c: f"{SCHEDULE_NAMES.get(c.schedule.name, c.schedule.name)}-{c.schedule.k}",
     "§3.1"),
    ("Batch", lambda c: f"{c.batch.prompts} prompts × {c.batch.generations} generations", "§2"),
    ("Reward", lambda c: f"{c.reward.correct:+g} correct, {c.reward.incorrect:+g} incorrect", "App. A.3"),
]


def base_preset(cfg: RunConfig) -> str:
    """The preset a run's config is read against: its own name when that is a preset, else ``scalerl``."""
    return cfg.name if cfg.name in preset_names() else "scalerl"


def reproduce_command(cfg: RunConfig, out: str | Path) -> str:
    """``scalerl train`` with the preset and the ``--set`` items that give ``cfg`` exactly."""
    preset = base_preset(cfg)
    sets = [item for path, _, new in config_diff(load_config(preset), cfg) if new != MISSING
            for item in _component_overrides(path, new)]
    if cfg.name != preset:
        sets.append(f"name={format_value(cfg.name)}")
    lines = [f"scalerl train --preset {shlex.quote(preset)}", *[f"--set {shlex.quote(s)}" for s in sets],
             f"--out {shlex.quote(str(out))}"]
    return " \\\n  ".join(lines)


_BREAK = re.compile(r"[ \t]*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+[ \t]*")


def _one_line(value: Any) -> str:
    """``value`` as text on one line: each line break (and the blanks around it) as one space."""
    return _BREAK.sub(" ", str(value))


def _text(value: Any) -> str:
    """User text (a run name, a model folder, a config value) as Markdown that shows it as it is: on one line (a line
    break would end a table row, or start a heading, an HTML block or a code fence), with no raw HTML (a tag or a
    comment would be hidden, with what follows), no code span, link or image, and backslashes shown as typed."""
    text = _one_line(value).replace("\\", "\\\\").replace("`", "\\`").replace("](", "]\\(")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fence(text: str, least: int = 1) -> str:
    """Backticks that open and close ``text`` as code: more in a row than ``text`` holds, at least ``least``."""
    return "`" * max(least, max((len(r) for r in re.findall("`+", text)), default=0) + 1)


def _code(value: Any) -> str:
    """``value`` on one line as a code span, fenced with more backticks than it holds in a row."""
    text = _one_line(value)
    fence = _fence(text)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fenced(language: str, body: str) -> list[str]:
    """A fenced code block of ``body``, its fence longer than any run of backticks in it (so no line closes it)."""
    fence = _fence(body, least=3)
    return [fence + language, body, fence]


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    def cell(v: Any) -> str:
        return _text(v).replace("|", "\\|")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(cell(v) for v in row) + " |" for row in rows], ""]


def _read_fit(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "fit.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _results(metrics: list[dict[str, Any]], cfg: RunConfig) -> list[str]:
    evals = [r for r in metrics if r.get("val/pass_rate") is not None]
    if not evals:
        return ["No evaluation was logged.", ""]
    last = evals[-1]
    rates = [(k.removesuffix("/pass_rate"), f"{last[k]:.3f}") for k in pass_rate_keys(last)]
    n = int(last.get("val/n", 0))
    lines = [f"At step {last['step']}: mean@{cfg.eval.n_samples} over {n // max(cfg.eval.n_samples, 1)} validation "
             f"prompts ({n} samples), temperature 1 (§2). First evaluation (step {evals[0]['step']}, R0): "
             f"{evals[0]['val/pass_rate']:.3f}.", ""]
    return lines + _table(("set", "pass rate"), rates)


def _compute(metrics: list[dict[str, Any]]) -> list[str]:
    if not metrics:
        return ["Nothing was logged.", ""]
    last = metrics[-1]
    hours = last.get("compute/device_hours", 0.0) or 0.0
    rows = [("steps trained", last.get("step", 0)), ("device-hours", f"{hours:.4g} ({hours * 3600:.0f} device-s)"),
            ("FLOPs (2·P per generated token, 6·P per trained token)", f"{last.get('compute/flops', 0.0) or 0.0:.3g}"),
            ("completion tokens generated", f"{int(last.get('compute/tokens', 0) or 0):,}"),
            ("wall clock", f"{last.get('time/wall_s', 0.0) or 0.0:.0f} s")]
    return _table(("spent", "amount"), rows)


def _fit(fit_doc: dict[str, Any] | None, cfg: RunConfig, n_evals: int) -> list[str]:
    fits = (fit_doc or {}).get("fits") or []
    if not fits:
        return [f"No fit: {n_evals} evaluations were logged, and the sigmoid's four parameters need at least "
                f"{cfg.forecast.min_points} past the fit's start (§2.1), and a curve they determine.", "",
                "Forecast trust: not available.", ""]
    lines = []
    for fit in fits:
        label = "" if fit is fits[0] else f"{_text(fit['y'])}: "
        lines.append(f"- {label}{describe_fit(fit)}{' (95% interval)' if fit['identified'] else ''}, "
                     f"{describe_shape(fit, ' ' + fit['x'])} ({fit['n_points']} points, {fit.get('method', '')})")
    check = (fit_doc or {}).get("extrapolation") or {}
    if "mean_abs_err" in check:
        lines.append(f"- Extrapolation check (§4, §5): fitted on the first half of the compute, the curve predicts the "
                     f"second half within mean |error| {check['mean_abs_err']:.3f} (max {check['max_abs_err']:.3f}).")
    elif check.get("note"):
        lines.append(f"- Extrapolation check (§4, §5): not possible: {check['note']}")
    trust = describe_trust(fits[0]) if fits[0].get("trust") else "not available"
    return lines + ["", f"Forecast trust: {trust}.", ""]


def _use(folder: str) -> list[str]:
    literal, arg = json.dumps(folder), shlex.quote(folder)  # a JSON string is a Python string literal
    return [
        "## Use", "",
        *_fenced("python", "\n".join([
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f"model = AutoModelForCausalLM.from_pretrained({literal})",
            f"tokenizer = AutoTokenizer.from_pretrained({literal})"])), "",
        f"Serve it with vLLM: {_code('vllm serve ' + arg)}. `generation_config.json` samples as training did "
        "(temperature 1, whole vocabulary); the run's interruptions (§2) are scalerl's engines' own and not part "
        f"of plain `generate`. {_code('scalerl eval ' + arg)} evaluates it as the run did.", "",
    ]


def render_run_card(cfg: RunConfig, run_dir: Path | None, export_step: int | None = None, export_dir: str = ".") -> str:
    """The card's markdown for the run in ``run_dir`` (``config.yaml`` there, or ``cfg``); with ``export_step``
    the card of the folder ``export_dir`` (hub front matter, the step it holds, how to load it)."""
    run_dir = Path(run_dir) if run_dir is not None else None
    metrics = read_metrics(run_dir) if run_dir is not None else []
    fit_doc = _read_fit(run_dir) if run_dir is not None else None
    task = ", ".join(e.name for e in cfg.task.mix) if cfg.task.mix else cfg.task.name
    lines: list[str] = []
    if export_step is not None:
        lines += ["---", "library_name: transformers", "pipeline_tag: text-generation",
                  "tags: [scalerl, reinforcement-learning]", "---", ""]
    lines += [f"# {_text(cfg.name)}: {_text(cfg.model.name)} trained with RL on {_text(task)}", "",
              "Trained with [scalerl](https://arxiv.org/abs/2510.13786) (\"The Art of Scaling Reinforcement Learning "
              "Compute for LLMs\"), seed " f"{cfg.seed}.", ""]
    if export_step is not None:
        logged = next((r["val/pass_rate"] for r in metrics if r.get("step") == export_step
                       and r.get("val/pass_rate") is not None), None)
        at = f"; validation pass rate logged at that step: {logged:.3f}" if logged is not None else ""
        lines += [f"This folder holds the policy at step {export_step} of run {_code(run_dir)}{at}.", ""]
    lines += ["## Recipe", ""] + _table(("component", "this run", "paper"), [(n, f(cfg), s) for n, f, s in RECIPE])
    preset = base_preset(cfg)
    diff = config_diff(load_config(preset), cfg)
    lines += [f"## Differences from the `{preset}` preset", ""]
    shown = [(p, *("(not set)" if v == MISSING else format_value(v) for v in (a, b))) for p, a, b in diff]
    lines += _table(("field", preset, "this run"), shown) \
        if diff else ["None: the run is the preset as it stands.", ""]
    lines += ["## Compute spent", ""] + _compute(metrics)
    if (fit_doc or {}).get("stopped"):  # fit.json: why --stop-when ended the run before its budget
        lines += [f"Stopped before its budget by `--stop-when`: {_text(fit_doc['stopped'])}; `--resume` "
                  "continues it.", ""]
    lines += ["## Final validation and downstream pass rates", ""] + _results(metrics, cfg)
    n_evals = sum(r.get("val/pass_rate") is not None for r in metrics)
    lines += ["## Fit of the compute-reward curve (Eq. 1)", ""] + _fit(fit_doc, cfg, n_evals)
    lines += ["## Reproduce", "", *_fenced("bash", reproduce_command(cfg, run_dir or "runs/" + cfg.name)), ""]
    if export_step is not None:
        lines += _use(export_dir)
    return "\n".join(lines)


def write_run_card(run_dir: str | Path) -> Path:
    """Write ``RUN/README.md`` (atomically) from the run's files; returns its path."""
    run_dir = Path(run_dir)
    path = run_dir / CARD
    write_text(path, render_run_card(config_from_run_dir(run_dir), run_dir))
    return path
