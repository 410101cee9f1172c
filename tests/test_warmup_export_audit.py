"""Audit of the warm-up cache, the export, the run card and the progress display.

* The warm-up cache key holds everything that changes what the warm-up produces (each such change is a miss) and
  nothing that does not (the RL learning rate, the RL steps, the run's seed with the base model's seed fixed, the
  model's context length: each a hit); a damaged cache entry is rebuilt, a writer killed mid-write leaves nothing
  under the entry's name, two processes warming the same key at once leave one whole entry, ``SCALERL_CACHE`` is
  where the cache lives.
* The run card cannot be broken by user text (a run name, a system prompt, an interruption phrase, a task file path,
  an export folder): no content is hidden by raw HTML, a broken table or a code fence closed early.
* The progress display survives a metrics row with missing keys or None/NaN values and prints nothing to stdout.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scalerl.config import ModelConfig, WarmupConfig, load_config
from scalerl.models.tiny import build_tiny
from scalerl.models.tokenizer import CharTokenizer
from scalerl.models.warmup import warmup
from scalerl.tasks.arithmetic import ArithmeticTask

ROOT = Path(__file__).resolve().parents[1]
ARCH = ModelConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=48)
TOK = CharTokenizer()
TASK = dict(seed=0, n_train=24, n_val=4, min_operands=2, max_operands=2, max_digits=1, subtraction=False)
WARM = WarmupConfig(steps=3, batch_size=4, optimizer="adamw")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test with its own empty cache: never the user's, never another test's."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SCALERL_CACHE", str(cache))
    return cache


def _warm(model_cfg: ModelConfig = ARCH, warm: WarmupConfig = WARM, seed: int = 0, task: dict | None = None,
          tokenizer=TOK, encode=None, model_seed: int | None = None) -> tuple[torch.nn.Module, dict]:
    model = build_tiny(model_cfg, seed if model_seed is None else model_seed, tokenizer)
    stats = warmup(model, tokenizer, ArithmeticTask(**(task or TASK)), warm, seed=seed, encode=encode)
    return model, stats


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "warmup").glob("*.pt"))


class PadThree(CharTokenizer):
    """The built-in tokenizer with another padding id: the same ids for every text, another attention mask."""

    def __init__(self) -> None:
        super().__init__()
        self.pad_id = 3


# ------------------------------------------------------------------------------------------- the cache key


MISSES = {
    "warmup.steps": dict(warm=WARM.model_copy(update={"steps": 4})),
    "warmup.batch_size": dict(warm=WARM.model_copy(update={"batch_size": 5})),
    "warmup.lr": dict(warm=WARM.model_copy(update={"lr": 1e-2})),
    "warmup.decay": dict(warm=WARM.model_copy(update={"decay": 0.9})),
    "warmup.optimizer": dict(warm=WARM.model_copy(update={"optimizer": "muon"})),
    "seed": dict(seed=1),
    "initial weights (model seed)": dict(model_seed=5),
    "model.n_heads": dict(model_cfg=ARCH.model_copy(update={"n_heads": 4})),
    "model.d_model": dict(model_cfg=ARCH.model_copy(update={"d_model": 48})),
    "model.n_layers": dict(model_cfg=ARCH.model_copy(update={"n_layers": 2})),
    "model.dtype": dict(model_cfg=ARCH.model_copy(update={"dtype": "bfloat16"})),
    "task.seed": dict(task={**TASK, "seed": 1}),
    "task.n_train": dict(task={**TASK, "n_train": 25}),
    "task.params.max_operands (tiers)": dict(task={**TASK, "max_operands": 3}),
    "task.params.max_digits": dict(task={**TASK, "max_digits": 2}),
    "prompt format": dict(encode=lambda text: TOK.encode("Q: " + text)),
    "tokenizer padding id": dict(tokenizer=PadThree()),
}


@pytest.mark.parametrize("change", list(MISSES))
def test_a_change_that_changes_the_warm_up_is_a_cache_miss(change, own_cache):
    base, first = _warm()
    assert not first["cached"] and _warm()[1]["cached"]  # the same inputs: a hit
    _, other = _warm(**MISSES[change])
    assert not other["cached"], f"{change} changed, yet the cached warm-up was reused"
    assert len(_entries(own_cache)) == 2


def test_the_head_count_is_keyed_because_it_changes_the_warmed_weights():
    """The defect the key had: n_heads splits the same matrices into other heads, so two models with the same
    initial weights train to different weights; the key hashed only the weights, and a model with 4 heads got the
    warm-up of the model with 2."""
    two, _ = _warm()
    four_cfg = ARCH.model_copy(update={"n_heads": 4})
    assert all(torch.equal(a, b) for a, b in zip(build_tiny(ARCH, 0).state_dict().values(),
                                                 build_tiny(four_cfg, 0).state_dict().values()))  # same start
    four, stats = _warm(four_cfg, warm=WARM.model_copy(update={"cache": False}))
    assert not all(torch.equal(a, b) for a, b in zip(two.state_dict().values(), four.state_dict().values()))
    assert not _warm(four_cfg)[1]["cached"]


def test_what_does_not_change_the_warm_up_reuses_it(own_cache):
    """The context length (the rotary tables of the positions used are the same) and the cache flag do not change
    the warm-up; neither do the RL settings, which warmup() never sees (the runner test below)."""
    base, _ = _warm()
    again, stats = _warm(ARCH.model_copy(update={"max_seq_len": 64}))
    assert stats["cached"] and len(_entries(own_cache)) == 1
    assert all(torch.equal(a, b) for a, b in zip(base.state_dict().values(), again.state_dict().values()))


def test_runs_that_differ_only_in_rl_settings_share_one_warm_up(tmp_path, own_cache):
    """Through the runner: another RL learning rate, number of RL steps, run seed (base model's seed fixed) reuse the
    cached warm-up; another head count does not."""
    from scalerl.pipeline.runner import train
    from test_pipeline import MICRO

    def run(name: str, *sets: str) -> None:
        cfg = load_config("scalerl", None, [*MICRO, "backend=inline", "eval.every=100", "checkpoint_every=100",
                                            "warmup.steps=3", "warmup.batch_size=4", "model.seed=0", *sets])
        train(cfg, tmp_path / name, show_progress=False)

    run("a", "steps=1")
    assert len(_entries(own_cache)) == 1
    (entry,) = _entries(own_cache)
    stamp = entry.stat().st_mtime_ns
    run("b", "steps=2", "optim.lr=3e-4", "seed=7")
    assert _entries(own_cache) == [entry] and entry.stat().st_mtime_ns == stamp  # read, not written again
    run("c", "steps=1", "model.n_heads=4")
    assert len(_entries(own_cache)) == 2


# ------------------------------------------------------------------------------------ the cache's robustness


def test_scalerl_cache_is_where_the_cache_lives(own_cache):
    _, stats = _warm()
    assert Path(stats["path"]).parent == own_cache / "warmup" and Path(stats["path"]).is_file()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "other_model"])
def test_a_damaged_cache_entry_is_rebuilt_not_a_traceback(damage, own_cache, capsys):
    fresh, first = _warm()
    path = Path(first["path"])
    good = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a torch file" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a whole torch file, of another model's weights
        torch.save({"state_dict": build_tiny(ARCH.model_copy(update={"d_model": 48}), 0).state_dict(),
                    "stats": first}, path)
    capsys.readouterr()
    again, stats = _warm()
    assert not stats["cached"] and "warm-up cache entry" in capsys.readouterr().err
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), again.state_dict().values()))
    assert _warm()[1]["cached"]  # rebuilt: whole again
    assert [p.name for p in (own_cache / "warmup").iterdir()] == [path.name]


def test_a_writer_killed_mid_write_leaves_no_entry(monkeypatch, own_cache):
    real_save = torch.save

    def dies_midway(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"PK\x03\x04 half")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        _warm()
    monkeypatch.setattr(torch, "save", real_save)
    assert _entries(own_cache) == []  # nothing under an entry's name
    assert not _warm()[1]["cached"] and _warm()[1]["cached"]


_RACE = """
import sys
from scalerl.config import ModelConfig, WarmupConfig
from scalerl.models.tiny import build_tiny
from scalerl.models.tokenizer import CharTokenizer
from scalerl.models.warmup import warmup
from scalerl.tasks.arithmetic import ArithmeticTask
tok = CharTokenizer()
model = build_tiny(ModelConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=48), 0, tok)
task = ArithmeticTask(seed=0, n_train=24, n_val=4, min_operands=2, max_operands=2, max_digits=1, subtraction=False)
sys.stdin.read()  # start together
print(warmup(model, tok, task, WarmupConfig(steps=40, batch_size=4, optimizer="adamw"), seed=0)["cached"])
"""


def test_two_processes_warming_the_same_key_leave_one_whole_entry(own_cache):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", _RACE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate("go", timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    (entry,) = _entries(own_cache)
    assert [p.name for p in (own_cache / "warmup").iterdir()] == [entry.name]  # no temporaries left
    model, stats = _warm(warm=WarmupConfig(steps=40, batch_size=4, optimizer="adamw"))
    assert stats["cached"] and stats["path"] == str(entry)
    alone, _ = _warm(warm=WarmupConfig(steps=40, batch_size=4, optimizer="adamw", cache=False))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(model.state_dict().values(),
                                                               alone.state_dict().values()))


def test_an_unwritable_cache_warns_and_keeps_the_warm_up(monkeypatch, tmp_path, capsys):
    """Writing the cache is a saving, not the result: a cache that cannot be written (a read-only or full disk)
    is a warning, and the model keeps its warm-up."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.setenv("SCALERL_CACHE", str(blocker))
    model, stats = _warm()
    assert not stats["cached"] and "path" not in stats and "warm-up cache" in capsys.readouterr().err
    alone, _ = _warm(warm=WARM.model_copy(update={"cache": False}))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), alone.state_dict().values()))


# -------------------------------------------------------------------------------------------------- run card


def _hostile_config():
    """User text that Markdown would otherwise act on: a line break opening a code fence and a heading, an HTML
    comment and tags, table pipes and a backslash before one, backticks, a link."""
    from scalerl.config import build_config

    doc = load_config("scalerl").model_dump(mode="json")
    doc["name"] = "a|b <!-- c\n```\n# not a heading [x](http://hidden)"
    doc["model"]["system"] = "line one\n\n<details>\nline | two\\|three"
    doc["algo"]["length"]["params"]["phrase"] = "Okay, time is up. </think>"
    doc["task"]["params"] = {"path": "data/a|b<c>`d`.jsonl"}
    return build_config(doc)


def _inline_text(token) -> str:
    """What a reader sees of an inline token: its text, code and line breaks as spaces."""
    return "".join(c.content if c.type in ("text", "code_inline") else " " if "break" in c.type else ""
                   for c in token.children or [])


def test_user_text_cannot_hide_anything_in_the_run_card(tmp_path):
    import ast
    import shlex

    from markdown_it import MarkdownIt

    from scalerl.presets import format_value
    from scalerl.runcard import render_run_card

    cfg = _hostile_config()
    run_dir = tmp_path / "run `1` <b>"
    run_dir.mkdir()
    folder = str(tmp_path / 'out `x` "q"\\dir')
    card = render_run_card(cfg, run_dir, export_step=2, export_dir=folder)
    assert card.startswith("---\n")
    body = card.split("---\n", 2)[2]  # after the hub's front matter
    tokens = MarkdownIt("commonmark").enable("table").parse(body)
    every = [t for tok in tokens for t in [tok, *(tok.children or [])]]
    assert not [t for t in every if t.type.startswith("html")]  # no raw HTML: nothing a renderer hides
    links = [t.attrs.get("href") or t.attrs.get("src") for t in every if t.type in ("link_open", "image")]
    assert links == ["https://arxiv.org/abs/2510.13786"]  # the paper's; none made of user text

    headings = [_inline_text(tokens[i + 1]) for i, t in enumerate(tokens) if t.type == "heading_open"]
    name = " ".join(cfg.name.split("\n"))
    assert headings == [f"{name}: tiny trained with RL on arithmetic", "Recipe", "Differences from the scalerl preset",
                        "Compute spent", "Final validation and downstream pass rates",
                        "Fit of the compute-reward curve (Eq. 1)", "Reproduce", "Use"]
    paragraphs = [_inline_text(tokens[i + 1]) for i, t in enumerate(tokens) if t.type == "paragraph_open"]
    assert f"This folder holds the policy at step 2 of run {run_dir}." in paragraphs

    # every table row has its header's cells, and the user's values are there whole
    rows, row = [], None
    for t in tokens:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(_inline_text(t))
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    assert ["Length control", "interruptions (max_new_tokens 96, think_lo 24, think_hi 48, answer_budget 8, "
            "phrase Okay, time is up. </think>)", "§2, App. A.10"] in rows
    system = " ".join(format_value(cfg.model.system).split())
    assert ["model.system", "null", system] in [[" ".join(c.split()) for c in r] for r in rows]
    assert ["task.params.path", "(not set)", "data/a|b<c>`d`.jsonl"] in rows
    assert all(len(r) == 3 for r in rows) and len(rows) == 16  # recipe 1 + 11, differences 1 + 3

    fences = [t for t in tokens if t.type == "fence"]
    assert [f.info for f in fences] == ["bash", "python"]
    argv = shlex.split(fences[0].content.replace("\\\n", " "))
    assert argv[-2:] == ["--out", str(run_dir)]
    assert load_config("scalerl", None, [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]) == cfg
    calls = [n for n in ast.walk(ast.parse(fences[1].content)) if isinstance(n, ast.Call)]
    assert [ast.literal_eval(c.args[0]) for c in calls] == [folder, folder]  # the folder, as a Python string
    assert any(f"vllm serve {shlex.quote(folder)}" in p for p in paragraphs)


def test_run_card_compute_and_results_follow_the_metrics_and_survive_none(tmp_path):
    """The compute the card states is the last row's; values logged as None (a step that trained nothing) do not
    break it."""
    from scalerl.runcard import render_run_card

    rows = [{"step": 0, "time/wall_s": 1.0, "compute/device_hours": 0.0, "compute/flops": 0.0, "compute/tokens": 0.0,
             "val/pass_rate": 0.25, "val/n": 8.0},
            {"step": 1, "time/wall_s": 5.0, "compute/device_hours": 0.002, "compute/flops": None,
             "compute/tokens": None, "loss": None, "train/reward_mean": None},
            {"step": 2, "time/wall_s": 9.4, "compute/device_hours": 0.004, "compute/flops": 3.5e9,
             "compute/tokens": 1234.0, "val/pass_rate": 0.5, "val/n": 8.0, "downstream/x/pass_rate": None}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config("scalerl", None, ["eval.n_samples=2"])
    card = render_run_card(cfg, tmp_path)
    for line in ("| steps trained | 2 |", "| device-hours | 0.004 (14 device-s) |",
                 "| FLOPs (2·P per generated token, 6·P per trained token) | 3.5e+09 |",
                 "| completion tokens generated | 1,234 |", "| wall clock | 9 s |", "| val | 0.500 |"):
        assert line in card
    assert "At step 2: mean@2 over 4 validation prompts (8 samples)" in card and "R0): 0.250." in card
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    card = render_run_card(cfg, tmp_path)  # the last row holds None where numbers would be
    assert "| FLOPs (2·P per generated token, 6·P per trained token) | 0 |" in card


# -------------------------------------------------------------------------------------------------- progress


@pytest.mark.parametrize("row", [
    {"step": 3},
    {"step": 3, "train/reward_mean": None, "train/pass_rate": None, "train/truncation_rate": None,
     "time/wall_s": None},
    {"step": 3, "train/reward_mean": math.nan, "train/pass_rate": math.nan, "train/truncation_rate": math.nan,
     "time/wall_s": math.nan},
    {"train/reward_mean": 0.5},
])
def test_progress_survives_a_row_with_missing_none_or_nan_values(row, capsys):
    from rich.console import Console

    from scalerl.progress import RunDisplay

    cfg = load_config("scalerl", None, ["steps=5"])
    for enabled in (True, False):
        out = io.StringIO()
        display = RunDisplay(cfg, enabled=enabled, console=Console(file=out, width=200))
        with display:
            display.start(0, {"cached": True, "steps": 3, "loss_first": None, "loss_last": math.nan})
            display.step(row)
            display.eval({**row, "val/pass_rate": None, "val/tier/operands_2/pass_rate": None,
                          "compute/device_hours": None, "forecast/A": 0.6, "forecast/Cmid": None})
            display.eval({k: v for k, v in row.items() if k != "step"})
        text = out.getvalue()
        assert ("step" in text) == enabled  # the plain lines only when not quiet
    assert capsys.readouterr().out == ""  # never stdout


def test_quiet_progress_prints_nothing_to_stdout_but_warnings_to_stderr(capsys):
    from scalerl.progress import RunDisplay

    display = RunDisplay(load_config("scalerl", None, ["steps=3"]), enabled=False)
    with display:
        display.start(0, {"cached": False, "steps": 3})
        display.step({"step": 1, "train/truncation_rate": 0.5, "train/reward_mean": 0.0, "train/pass_rate": 0.0})
        display.eval({"step": 1, "val/pass_rate": 0.1})
    out = capsys.readouterr()
    assert out.out == "" and "warning:" in out.err and "val" not in out.err


# ---------------------------------------------------------------------------------------------------- export

# transformers alone (scalerl never imported): ids, last-position logits and the greedy completion of each prompt
_PLAIN = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, prompts = sys.argv[1], json.loads(sys.argv[2])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
out = []
for text in prompts:
    ids = tok(text)["input_ids"]
    t = torch.tensor([ids])
    with torch.no_grad():
        logits = model(t).logits[0].float()
        gen = model.generate(t, attention_mask=torch.ones_like(t), do_sample=False, max_new_tokens=12,
                             top_k=None, top_p=None, temperature=None)[0, len(ids):].tolist()
    out.append({"ids": ids, "logits": logits.tolist(), "greedy": gen})
print(json.dumps({"out": out, "scalerl": sorted(m for m in sys.modules if m.startswith("scalerl"))}))
"""


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory) -> Path:
    """A 2-step micro run of the built-in model after a short warm-up (so its greedy answers are not noise)."""
    from scalerl.pipeline.runner import train
    from test_pipeline import MICRO

    work = tmp_path_factory.mktemp("audit_export")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCALERL_CACHE", str(work / "cache"))
        cfg = load_config("scalerl", None, [*MICRO, "backend=inline", "steps=2", "eval.every=100",
                                            "checkpoint_every=1", "warmup.steps=60", "warmup.batch_size=16"])
        train(cfg, work / "run", show_progress=False)
    return work / "run"


def _greedy(model: torch.nn.Module, ids: list[int], eos: int, n: int = 12) -> list[int]:
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(torch.tensor([out]))[0, -1].argmax())
            out.append(nxt)
            if nxt == eos:
                break
    return out[len(ids):]


def test_export_gives_scalerls_logits_and_greedy_completion_with_transformers_alone(micro_run, tmp_path):
    """Logits within 1e-4 (float32 rounding of the split projections and another attention kernel), and the same
    greedy completion token for token, for prompts of the run's validation split."""
    from scalerl.build import build_task
    from scalerl.cli import main
    from scalerl.models.registry import prompt_encoder
    from scalerl.runs import load_policy, open_source

    out = tmp_path / "hf"
    main(["export", str(micro_run), "--out", str(out)])
    source = open_source(micro_run)
    prompts = [p.prompt for p in build_task(source.cfg.task).val_problems()[:4]]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", _PLAIN, str(out), json.dumps(prompts)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["scalerl"] == []
    bundle = load_policy(source, 2)
    encode = prompt_encoder(bundle)
    for text, plain in zip(prompts, got["out"]):
        assert plain["ids"] == encode(text)
        with torch.no_grad():
            mine = bundle.model(torch.tensor([plain["ids"]]))[0].float()
        assert torch.allclose(torch.tensor(plain["logits"]), mine, atol=1e-4, rtol=0)
        greedy = _greedy(bundle.model, plain["ids"], bundle.tokenizer.eos_id)
        assert plain["greedy"][: len(greedy)] == greedy


def test_an_export_stopped_midway_leaves_nothing_under_its_name(micro_run, tmp_path, monkeypatch):
    import scalerl.runcard
    from scalerl.export import write_export
    from scalerl.runs import open_source

    out = tmp_path / "hf"
    seen = {}

    def killed(*args, **kwargs):
        seen["out_exists"] = out.exists()
        seen["staged"] = [p.name for p in tmp_path.iterdir() if p.name.startswith(".hf.")]
        raise KeyboardInterrupt  # as a kill at this point: the weights and tokenizer are written, the card is not

    monkeypatch.setattr(scalerl.runcard, "render_run_card", killed)
    with pytest.raises(KeyboardInterrupt):
        write_export(open_source(micro_run), 2, out)
    assert seen["out_exists"] is False and len(seen["staged"]) == 1  # written beside, under a temporary name
    assert not out.exists() and list(tmp_path.iterdir()) == []
