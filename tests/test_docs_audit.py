"""The user documentation (README.md and docs/*.md; docs/RESULTS.md is a record of measurements, not instructions)
checked against the program, mechanically, for the kinds of statement no other doc test covers:

* every ``--flag`` a page gives a ``scalerl COMMAND`` exists in that command;
* every ``scalerl train`` / ``scalerl demo`` command a page shows resolves its config and passes the checks a run
  makes before it starts (the task's parameters and data files, the engine, the longest prompt plus the length
  budget against the model's context): a reader who pastes it does not get an error line;
* every metric a page names (``train/entropy``, ``forecast/A``, ``stop/reward``, the ``timing/<phase>_s`` phases of
  docs/architecture.md ...) is in the metrics.jsonl of a micro run, unless it is one the page says appears only
  under a condition (a failure, a mixture, another trainer's tag);
* the ``$ scalerl fit`` / ``$ scalerl compare`` transcripts of README.md and docs/predict.md are what the commands
  print now (each line shown, up to the runs of spaces a table pads with; "…" elides);
* the defaults a page states for ``scalerl demo --steps`` and the off-policy ``k`` are the code's.

(docs/api.md runs in tests/test_api_docs.py, docs/models.md in tests/test_models_doc.py.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "RESULTS.md")]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", flags=re.S)


def param_id(s: str) -> str:
    return re.sub(r"[^\w.=:/-]+", "_", s)


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def code_lines(page: Path) -> list[str]:
    """The lines of the page's fenced blocks, a line continued with a backslash joined to the next."""
    return [line for block in FENCE.findall(text(page)) for line in block.replace("\\\n", " ").splitlines()]


def inline_spans(page: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text(page)))


def cli_options() -> dict[str, set[str]]:
    import typer

    from scalerl.cli import app

    group = typer.main.get_command(app)
    return {name: {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]}
            for name, cmd in group.commands.items()}


def cli_mentions(page: Path, commands: set[str]) -> list[tuple[str, str]]:
    """(command, the rest of its line up to a comment or the next ``scalerl``) for every ``scalerl COMMAND`` (or
    ``-m scalerl COMMAND``) in the page's code blocks and inline code."""
    found = []
    for span in [*code_lines(page), *inline_spans(page)]:
        for part in re.split(r"(?=(?<![\w./-])scalerl\s)", span)[1:]:
            m = re.match(r"scalerl\s+([a-z]+)\b(.*)", part)
            if m and m.group(1) in commands:
                found.append((m.group(1), m.group(2).split(" #")[0]))
    return found


def test_every_flag_a_page_gives_a_command_exists():
    options = cli_options()
    bad, seen = [], 0
    for page in PAGES:
        for command, rest in cli_mentions(page, set(options)):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                seen += 1
                if flag not in options[command]:
                    bad.append(f"{page.name}: scalerl {command} {flag}")
    assert seen > 100  # the extraction found the pages' commands
    assert not bad, f"flags the pages give that the command does not have: {bad}"


# --- every train / demo command a page shows ---------------------------------------------------------------------

NOT_BUILT = ("smollm2", "/data/", "engine=vllm")  # SmolLM2's weights, the reader's own folder, vLLM: not here
NEEDS = {"task.name=math": "math_verify", "task.name=reasoning_gym": "reasoning_gym"}


def train_commands() -> list[pytest.param]:
    params = []
    for page in PAGES:
        for line in code_lines(page):
            m = re.search(r"(?:^|\s)(?:-m )?scalerl\s+(train|demo)\b(.*)", line)
            if not m or "[" in m.group(2) or "..." in m.group(2):  # a synopsis line, not a command
                continue
            marks = [pytest.mark.skipif(importlib.util.find_spec(mod) is None, reason=f"needs {mod}")
                     for key, mod in NEEDS.items() if key in m.group(2)]
            params.append(pytest.param(m.group(1), m.group(2), marks=marks,
                                       id=param_id(f"{page.name}:{m.group(1)}{m.group(2).split(' #')[0][:70]}")))
    return params


@pytest.mark.parametrize("command, rest", train_commands())
def test_every_train_command_a_page_shows_would_start(command, rest, monkeypatch):
    from scalerl.commands.train import config_from_cli
    from scalerl.pipeline.runner import build_parts

    monkeypatch.chdir(ROOT)  # the pages' paths (examples/...) are the checkout's
    argv = shlex.split(rest, comments=True)
    preset, config, sets = None, None, []
    for flag, value in zip(argv, argv[1:] + [""]):
        if flag == "--preset":
            preset = value
        elif flag == "--config":
            config = Path(value)
        elif flag == "--set":
            sets.append(value)
        elif flag == "--backend":
            sets.append(f"backend={value}")
        elif flag == "--address":
            sets.append(f"ray.address={value}")
    cfg = config_from_cli(preset, config, sets)  # a UserError (the one line a reader would get) fails the test
    if not any(s in rest for s in NOT_BUILT):
        build_parts(cfg)


# --- metric names --------------------------------------------------------------------------------------------------

METRIC = re.compile(r"`((?:train|val|compute|forecast|timing|stop|curriculum|throughput|time|grader|faults|"
                    r"downstream)/[A-Za-z0-9_/.-]+)`")
# named by a page, but present only under the condition the page states
CONDITIONAL = {
    "train/compute/flops": "a TensorBoard tag of the TRL callback, not a scalerl run's metric",
    "forecast/pred_at_budget": "the TRL callback's",
    "grader/failures/no_interpreter": "only when a sample's grader failed so",
    "grader/failures/timeout": "only when a sample's grader failed so",
    "val/grader_failures": "only when an evaluation had grader failures",
    "faults/generator_restarts": "the local and Ray backends' (the micro run is inline)",
    # logged only once the live fit is one a rule acts on (6 evaluations, a curve Eq. 1 describes): the micro run's
    # compute is its wall clock, so whether its 12 evaluations give one differs from run to run
    "stop/gain": "only with a trustworthy forecast",
    "stop/reach": "only with a trustworthy forecast",
}


def documented_metrics() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for name in METRIC.findall(text(page)):
            found.setdefault(name, []).append(page.name)
    # docs/architecture.md's contract also names bare keys and the timing phases in words
    contract = text(ROOT / "docs" / "architecture.md").split("### Metrics schema", 1)[1].split("###", 1)[0]
    for name in ("step", "loss", "grad_norm", "lr"):
        assert f"`{name}`" in contract
        found.setdefault(name, []).append("architecture.md")
    phases = re.search(r"`timing/<phase>_s` for each phase of a step \(([^;]+);", contract).group(1)
    for phase in re.split(r",\s*", phases):
        found.setdefault(f"timing/{phase.strip()}_s", []).append("architecture.md")
    return found


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory) -> set[str]:
    """The keys of a micro run's metrics.jsonl: the inline backend, one-digit sums, a 250-step warm-up (cached), 12
    steps evaluated at every step (enough evaluations for the live forecast), and a stop rule of all three kinds
    (so its ``stop/*`` numbers are logged, ``stop/gain`` and ``stop/reach`` once a fit is trusted). Only ``gain`` can
    fire: a forecast that carries the last value forward (it did no better than a ruler on the run's past) expects
    a gain of exactly 0, below any threshold; the run then stops after that evaluation, with its checkpoint."""
    out = tmp_path_factory.mktemp("docs_audit") / "run"
    sets = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "task.params.min_operands=2",
            "task.params.max_operands=2", "task.params.max_digits=1", "task.n_train=150", "task.n_val=16",
            "warmup.steps=250", "warmup.lr=0.005", "warmup.optimizer=adamw", "batch.prompts=4",
            "batch.generations=4", "eval.every=1", "eval.n_samples=2", "tensorboard=false", "steps=12", "threads=1",
            "checkpoint_every=4"]
    argv = [sys.executable, "-m", "scalerl", "train", "--out", str(out), "--backend", "inline", "--quiet",
            "--stop-when", "gain<1e-12,reward>=0.9999,reach<1e-6", *[x for s in sets for x in ("--set", s)]]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    keys: set[str] = set()
    for line in (out / "metrics.jsonl").read_text().splitlines():
        keys |= set(json.loads(line))
    assert {"config.yaml", "metrics.jsonl", "consumed.jsonl", "checkpoints", "fit.json", "curve.png",
            "README.md"} <= {p.name for p in out.iterdir()}  # README.md's "Each run directory holds ..."
    last = max(json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines())
    assert last == 12 or "stopped before the budget (--stop-when): gain<" in proc.stdout, proc.stdout[-2000:]
    assert {"latest", f"step_{last:07d}.pt"} <= {p.name for p in (out / "checkpoints").iterdir()}
    return keys


def test_every_metric_a_page_names_is_logged(micro_run):
    named = documented_metrics()
    assert len(named) > 40
    missing = {name: pages for name, pages in named.items()
               if not re.search(r"[<*\[]", name) and name not in CONDITIONAL and name not in micro_run}
    assert not missing, f"metrics the pages name that a run does not log: {missing}"


# --- transcripts ---------------------------------------------------------------------------------------------------

def transcripts() -> list[pytest.param]:
    """(command, the lines the page shows after it) for each ``$ scalerl fit`` / ``$ scalerl compare`` block."""
    params = []
    for page in (ROOT / "README.md", ROOT / "docs" / "predict.md"):
        for block in FENCE.findall(text(page)):
            lines = block.splitlines()
            if lines and re.match(r"\$ scalerl (fit|compare) ", lines[0]):
                params.append(pytest.param(lines[0][2:], lines[1:], id=param_id(f"{page.name}:{lines[0][10:70]}")))
    return params


def squash(s: str) -> str:
    return " ".join(s.split())


@pytest.mark.parametrize("command, shown", transcripts())
def test_the_fit_transcripts_are_what_the_commands_print(command, shown, tmp_path):
    argv = shlex.split(command)
    for flag in ("--plot", "--slope-plot"):  # figures go to the scratch directory, not into examples/
        if flag in argv:
            i = argv.index(flag) + 1
            shown = [line.replace(f"wrote {argv[i]}", f"wrote {tmp_path / Path(argv[i]).name}") for line in shown]
            argv[i] = str(tmp_path / Path(argv[i]).name)
    proc = subprocess.run([sys.executable, "-m", "scalerl", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = squash(proc.stderr + "\n" + proc.stdout)
    bad = []
    for line in shown:
        if not line.strip() or set(line.strip()) <= set("┏┳┓┡╇┩└┴┘━─ "):
            continue  # a table's rules: their widths follow the cells
        if not all(squash(piece) in printed for piece in line.split("…") if piece.strip()):
            bad.append(line)
    assert not bad, f"{command}: lines the page shows that the command no longer prints: {bad}\nprinted:\n{printed}"


# --- defaults stated in prose --------------------------------------------------------------------------------------

def test_the_defaults_the_pages_state_are_the_codes():
    from scalerl.commands.train import DEMO_STEPS
    from scalerl.config import ScheduleConfig

    readme, experiments = text(ROOT / "README.md"), text(ROOT / "docs" / "experiments.md")
    assert re.search(r"\(`--steps`, (\d+);", readme).group(1) == str(DEMO_STEPS)
    assert re.search(r"\(`--steps`, default (\d+)", experiments).group(1) == str(DEMO_STEPS)
    k = ScheduleConfig().k
    for page in PAGES:
        for m in re.finditer(r"PipelineRL-k \(the default[^)]*?k = (\d+)", text(page)):
            assert m.group(1) == str(k), f"{page.name}: {m.group(0)} (the default k is {k})"
