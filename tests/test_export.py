"""What a user takes away from a run (issue 33): ``scalerl export`` (a Hugging Face folder that transformers loads
alone, with the policy's log-probs), ``scalerl eval`` (the numbers the run logged, from a checkpoint or the export),
the run card, and plain output where stdout is not a terminal.

One micro run of the built-in model is trained through the real entry point with its output going to files, as
under ``nohup``; the tests read what it left behind. A second micro run trains a tiny random Hugging Face Llama
(a chat template, its own tokenizer) to check the export of Hugging Face models. Commands whose output a test does
not read as a non-terminal stream run through the same entry point in this process (``_in_process``), without an
interpreter start-up each.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from test_hf_model import char_tokenizer, llama_config  # noqa: E402  (a tiny Llama folder with a chat template)
from test_pipeline import MICRO  # noqa: E402

from scalerl.cli import main  # noqa: E402
from scalerl.config import build_config, config_from_run_dir, load_config  # noqa: E402
from scalerl.models.fp32_head import enable_fp32_head, token_logprobs  # noqa: E402
from scalerl.models.registry import prompt_encoder  # noqa: E402
from scalerl.runlog import read_metrics  # noqa: E402
from scalerl.runs import load_policy, open_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOWNSTREAM = "eval.downstream=[{name: three_ops, task: arithmetic, n: 4, params: {min_operands: 3, max_operands: 3}}]"
# two-operand problems and a short (cached) warm-up: some answers right from the start, so RL moves the weights
RUN_SETS = [*MICRO, "backend=inline", "steps=4", "eval.every=2", "checkpoint_every=2", "eval.n_samples=2",
            "task.params.max_operands=2", "warmup.steps=150", "warmup.optimizer=adamw", DOWNSTREAM]
# AdamW's 150 steps, as measured before Muon became the default (issue 31): the example script samples unseeded at
# temperature 1, and the micro model after 150 Muon steps of 48 sometimes ends at once (one full-suite run in four)
TEXT = "4-4-3=<think>4-4=0 0-3=-3</think>-3"

# transformers alone, in a process that never imports scalerl: the export's token ids and log-probs of TEXT
# (or of the chat-formatted prompt + TEXT when the tokenizer has a chat template), and a short generation
_LOAD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
folder, text = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
if tok.chat_template:
    chat = [{"role": "user", "content": "4-4-3="}]
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) + text
ids = tok(text, add_special_tokens=not tok.chat_template)["input_ids"]
t = torch.tensor([ids])
lp = torch.log_softmax(model(t).logits.float(), -1)[0, :-1].gather(-1, t[0, 1:, None])[:, 0]
torch.manual_seed(0)
out = model.generate(t[:, :8], max_new_tokens=5)
gen = GenerationConfig.from_pretrained(folder)
print(json.dumps({"text": text, "ids": ids, "logprobs": lp.tolist(), "generated": out.shape[1] - 8,
                  "sampling": [gen.do_sample, gen.temperature, gen.top_k, gen.top_p],
                  "chat_template": bool(tok.chat_template),
                  "scalerl": sorted(m for m in sys.modules if m.startswith("scalerl"))}))
"""


def _cli(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """The real entry point with stdout and stderr going to files (not a terminal), as under nohup or CI."""
    out, err = cwd / f".out{len(list(cwd.glob('.out*')))}", cwd / f".err{len(list(cwd.glob('.err*')))}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": ""}
    with open(out, "w") as fo, open(err, "w") as fe:
        done = subprocess.run([sys.executable, "-m", "scalerl", *args], stdout=fo, stderr=fe, env=env, cwd=cwd,
                              timeout=timeout)
    return subprocess.CompletedProcess(args, done.returncode, out.read_text(), err.read_text())


def _in_process(args: list[str], cwd: Path, capsys) -> subprocess.CompletedProcess:
    """The same entry point (``scalerl.cli.main``) in this process, run from ``cwd``: no interpreter start-up (a few
    seconds each) where a test reads what the command wrote, not how its output looks outside a terminal."""
    capsys.readouterr()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def _transformers_alone(folder: Path, text: str = TEXT) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", _LOAD, str(folder), text], capture_output=True, text=True,
                          cwd=folder.parent, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sets(items: list[str]) -> list[str]:
    return [a for s in items for a in ("--set", s)]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A 4-step micro run (checkpoints at steps 2 and 4, evaluations at 0, 2, 4, one downstream set)."""
    work = tmp_path_factory.mktemp("export")
    done = _cli(["train", "--out", "run", *_sets(RUN_SETS)], work)
    assert done.returncode == 0, done.stderr[-3000:]
    return work / "run", done


@pytest.fixture(scope="module")
def exported(run) -> Path:
    run_dir, _ = run
    out = run_dir.parent / "exported"
    done = _cli(["export", str(run_dir), "--out", str(out)], run_dir.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Writing model shards" not in done.stderr
    return out


def _scalerl_logprobs(bundle, ids: list[int]) -> torch.Tensor:
    enable_fp32_head(bundle.model)
    t = torch.tensor([ids])
    with torch.no_grad():
        return token_logprobs(bundle.model(t)[:, :-1], t[:, 1:])[0]


# ---------------------------------------------------------------------------------------------------- export


def test_export_loads_with_transformers_alone_and_gives_the_policys_logprobs(run, exported):
    run_dir, _ = run
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
            "README.md", "scalerl_export.json"} <= names
    got = _transformers_alone(exported)
    assert got["scalerl"] == []  # nothing from scalerl was imported
    bundle = load_policy(open_source(run_dir), 4)  # the latest checkpoint is what was exported
    assert got["ids"] == prompt_encoder(bundle)(TEXT)  # the built-in tokenizer as an HF one: same ids, BOS first
    mine = _scalerl_logprobs(bundle, got["ids"])
    assert torch.allclose(torch.tensor(got["logprobs"]), mine, atol=1e-5, rtol=0)  # fp32 rounding
    assert got["generated"] == 5
    assert got["sampling"] == [True, 1.0, 0, 1.0]  # temperature 1 over the whole vocabulary, as in training
    assert not got["chat_template"]


def test_export_of_an_earlier_step_holds_that_steps_weights(run, tmp_path, capsys):
    run_dir, _ = run
    done = _in_process(["export", str(run_dir), "--step", "2", "--out", str(tmp_path / "x")], tmp_path, capsys)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "x" / "scalerl_export.json").read_text())["step"] == 2
    got = _transformers_alone(tmp_path / "x")
    early = _scalerl_logprobs(load_policy(open_source(run_dir), 2), got["ids"])
    late = _scalerl_logprobs(load_policy(open_source(run_dir), 4), got["ids"])
    assert torch.allclose(torch.tensor(got["logprobs"]), early, atol=1e-5, rtol=0)
    assert not torch.allclose(early, late, atol=1e-4, rtol=0)  # training moved the weights: the step matters


def test_example_script_generates_from_the_export(exported):
    """The example samples at temperature 1, unseeded, as training did: the micro model's first token is end of
    sequence in about 1% of samples (3 of 300 measured; an empty answer, which a fresh checkout's suite met), so
    an empty answer is asked again, at most three times in all."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for _ in range(3):
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "generate_from_export.py"), str(exported),
                               "9+1+4="], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("9+1+4=")
        if len(done.stdout.strip()) > len("9+1+4="):
            break
    assert len(done.stdout.strip()) > len("9+1+4=")


@pytest.mark.slow
def test_hugging_face_model_exports_with_its_chat_template(tmp_path, capsys):
    """A run of a (tiny, random) Hugging Face Llama: the save_pretrained path, its tokenizer and chat template."""
    folder = tmp_path / "tiny-llama"
    llama_config().save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    sets = [*(s for s in MICRO if not s.startswith("algo.length")), "backend=inline", "steps=1", "eval.n_prompts=2",
            f"model.name={folder}", "algo.length.name=none", "algo.length.params.max_new_tokens=16"]
    done = _in_process(["train", "--out", "hfrun", *_sets(sets)], tmp_path, capsys)
    assert done.returncode == 0, done.stderr[-3000:]
    # a random model earns no reward, so RL leaves it as it was: change the checkpoint's weights by hand, so that
    # the export shows it holds the checkpoint's and not the base folder's
    (ckpt,) = (tmp_path / "hfrun" / "checkpoints").glob("step_*.pt")
    payload = torch.load(ckpt, weights_only=False)
    payload["trainer"]["model"]["hf.model.embed_tokens.weight"] *= 3.0
    torch.save(payload, ckpt)
    done = _in_process(["export", "hfrun", "--out", "hfexp"], tmp_path, capsys)
    assert done.returncode == 0, done.stderr[-3000:]
    got = _transformers_alone(tmp_path / "hfexp")
    assert got["scalerl"] == [] and got["chat_template"]
    bundle = load_policy(open_source(tmp_path / "hfrun"), 1)
    assert got["ids"] == bundle.tokenizer.encode(got["text"])
    mine = _scalerl_logprobs(bundle, got["ids"])
    assert torch.allclose(torch.tensor(got["logprobs"]), mine, atol=1e-5, rtol=0)
    base = _scalerl_logprobs(load_policy(open_source(folder), 0), got["ids"])
    assert not torch.allclose(base, mine, atol=1e-3, rtol=0)


# ------------------------------------------------------------------------------------------------------ eval


def _logged(run_dir: Path) -> dict[int, dict]:
    return {int(r["step"]): r for r in read_metrics(run_dir) if "val/pass_rate" in r}


def test_eval_of_each_checkpoint_reproduces_what_the_run_logged(run, tmp_path):
    run_dir, _ = run
    done = _cli(["eval", str(run_dir), "--all", "--json", str(tmp_path / "e.json")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "e.json").read_text())
    logged = _logged(run_dir)
    assert [e["step"] for e in doc["evaluations"]] == [2, 4]
    for e in doc["evaluations"]:
        keys = [k for k in e if k.startswith(("val/", "downstream/"))]
        assert "downstream/three_ops/pass_rate" in keys and "val/truncation_rate" in keys
        assert {k: e[k] for k in keys} == {k: logged[e["step"]][k] for k in keys}  # exactly, every sample
        assert all(e[f"logged/{k}"] == e[k] for k in keys)
    # the sampled tokens differ between the two steps (a reproduction of one evaluation twice would not)
    first, second = doc["evaluations"]
    assert any(first[k] != second[k] for k in keys)
    table = done.stdout
    assert "(logged)" in table and "three_ops" in table


def test_eval_of_the_export_gives_the_numbers_of_its_checkpoint(run, exported, tmp_path, capsys):
    run_dir, _ = run
    done = _in_process(["eval", str(exported), "--json", "-"], tmp_path, capsys)
    assert done.returncode == 0, done.stderr[-3000:]
    (e,) = json.loads(done.stdout)["evaluations"]
    row = _logged(run_dir)[4]
    assert e["step"] == 4 and e["val/truncation_rate"] == row["val/truncation_rate"]
    assert e["val/pass_rate"] == row["val/pass_rate"] == e["logged/val/pass_rate"]


def test_eval_with_other_samples_or_task_is_not_compared_with_the_log(run, tmp_path, capsys):
    run_dir, _ = run
    done = _in_process(["eval", str(run_dir), "--step", "4", "--n-samples", "1", "--task", "strings", "--json", "-"],
                       tmp_path, capsys)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    (e,) = doc["evaluations"]
    assert doc["n_samples"] == 1 and doc["task"]["name"] == "strings"
    assert e["val/n"] == 8 and not any(k.startswith("logged/") for k in e)


# -------------------------------------------------------------------------------------------------- run card


def _reproduced(card: str) -> list[str]:
    block = card.split("## Reproduce")[1].split("```bash")[1].split("```")[0]
    return shlex.split(block.replace("\\\n", " "))


def test_run_card_names_the_recipe_and_reproduces_the_config(run):
    run_dir, _ = run
    card = (run_dir / "README.md").read_text()
    for row in ("| Loss | CISPO (eps_max 4.0) | §3.2, App. A.17 |", "| Off-policy schedule | PipelineRL-2 | §3.1 |",
                "| Prompt sampling | No-Positive-Resampling (threshold 0.9) | §3.2, Fig. 6b |",
                "| FP32 LM head | on | §3.2, Fig. 5b |", "| steps | 200 | 4 |", "| steps trained | 4 |"):
        assert row in card
    last = _logged(run_dir)[4]
    assert f"| val | {last['val/pass_rate']:.3f} |" in card
    assert f"| downstream/three_ops | {last['downstream/three_ops/pass_rate']:.3f} |" in card
    assert "Forecast trust: not available." in card and "No fit:" in card
    argv = _reproduced(card)
    assert argv[:4] == ["scalerl", "train", "--preset", "scalerl"] and argv[-2:] == ["--out", "run"]  # as typed
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert load_config("scalerl", None, sets) == config_from_run_dir(run_dir)  # the command gives the same config


def test_run_card_reports_the_fit_bound_and_trust(tmp_path):
    from scalerl.runcard import render_run_card

    cfg = build_config(load_config("dapo_qwen").model_dump(mode="json") | {"seed": 3})
    fit = {"y": "val/pass_rate", "x": "compute/device_hours", "A": 1.0, "A_ci": [0.41, 1.0], "identified": False,
           "fit_window": [0.01, 0.2], "Cmid": 1.5, "B": 1.1, "R0": 0.3, "n_points": 9, "method": "vp",
           "trust": {"summary": "trusted: the run passed Cmid"}}
    (tmp_path / "fit.json").write_text(json.dumps({"fits": [fit], "extrapolation": {"note": "too few points"}}))
    card = render_run_card(cfg, tmp_path)
    assert "A ≥ 0.41, not identified yet: the run has not passed Cmid" in card
    assert "Forecast trust: trusted: the run passed Cmid." in card
    assert "| Loss | DAPO (eps_low 0.2, eps_high 0.26) |" in card and "PPO-off-policy-2" in card
    assert "## Differences from the `dapo_qwen` preset" in card and "| seed | 0 | 3 |" in card
    fit.update(A=0.62, A_ci=[0.58, 0.66], identified=True, fit_window=[0.01, 3.0])
    del fit["trust"]
    (tmp_path / "fit.json").write_text(json.dumps({"fits": [fit], "extrapolation": {}}))
    card = render_run_card(cfg, tmp_path)
    assert "A = 0.620 [0.580, 0.660] (95% interval)" in card and "Forecast trust: not available." in card


def test_export_card_says_which_step_and_how_to_serve(exported):
    card = (exported / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert "policy at step 4" in card and f"vllm serve {exported}" in card


# ----------------------------------------------------------------------------------- output that is not a TTY


def test_output_to_a_file_is_plain_whole_lines(run):
    _, done = run
    text = done.stdout + done.stderr
    assert "progress.py:" not in text and "\x1b[" not in text and "━" not in text  # no log path, colour, bar
    steps = [line for line in done.stderr.splitlines() if line.startswith("scalerl step ")]
    assert [line.split()[2] for line in steps] == ["1/4", "2/4", "3/4", "4/4"]  # one whole line per step
    evals = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in evals] == ["step 0", "step 2", "step 4"]
    known = ("warm-up: ", "step ", "scalerl step ", "warning: ", "run directory: ", "no forecast: ", "wrote ")
    assert all(line.startswith(known) for line in text.splitlines())  # no line is the wrapped end of another
    assert any(len(line) > 80 for line in text.splitlines())  # and long ones stay long (the warm-up's, a warning)
    assert "wrote the run card" in done.stdout


def test_demo_checks_are_whole_lines_when_captured(monkeypatch, tmp_path, capsys):
    from scalerl.commands.train import print_summary

    fit = {"A": 0.62, "A_ci": [0.58, 0.66], "identified": True, "fit_window": [0.01, 3.0], "Cmid": 1.015,
           "B": 1.03, "R0": 0.371, "x": "compute/device_hours"}
    check = {"n": 6, "mean_abs_err": 0.012, "max_abs_err": 0.025, "end_pred": 0.61, "end_true": 0.6,
             "covers_full_A": True}
    print_summary(tmp_path, {"fit": fit, "extrapolation": check})
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("extrapolation check (§4, §5):") and line.rstrip().endswith("covers the full run's A")
               for line in lines)  # one line of ~250 characters, not wrapped at 80


def test_in_process_cli_export_refuses_a_model_folder(exported, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["export", str(exported), "--out", str(tmp_path / "again")])
    assert exc.value.code == 2 and "is a model folder, not a run directory" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("preset, sets", [
    ("scalerl", ["algo.loss.name=dapo", "seed=2", "name=mine", DOWNSTREAM]),
    ("dapo_qwen", ["algo.length.name=interruption", "model.d_model=64"]),
    ("multitask", []),
])
def test_reproduce_command_gives_the_same_config(preset, sets):
    from scalerl.runcard import reproduce_command

    cfg = load_config(preset, None, sets)
    argv = shlex.split(reproduce_command(cfg, "runs/x").replace("\\\n", " "))
    assert argv[:4] == ["scalerl", "train", "--preset", preset]  # "mine" is no preset: read against scalerl
    again = load_config(preset, None, [argv[i + 1] for i, a in enumerate(argv) if a == "--set"])
    assert again == cfg
