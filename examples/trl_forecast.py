"""A scalerl forecast of a run trained by TRL's GRPOTrainer (§1–§2), then ``scalerl fit`` on what TRL wrote.

    python examples/trl_forecast.py --out runs/trl-forecast [--steps 120] [--eval-every 10] [--axis flops]

The policy is scalerl's built-in model after its cached supervised warm-up, exported to HF Llama, with the
built-in tokenizer as a ``PreTrainedTokenizerFast`` (both as in bench/rl_vs_trl.py); the reward is the task's
verifier (1 correct, 0 not), so ``eval_reward`` on the held-out split is the pass rate. TRL evaluates every
``--eval-every`` steps (and once before training: the reward at zero compute, R0) and logs to TensorBoard;
:class:`scalerl.integrations.trl.ForecastCallback` fits Eq. 1 to ``eval_reward`` after each evaluation and logs
``forecast/*`` through TRL's loggers. At the end the script saves ``trainer_state.json`` and runs ``scalerl fit``
on it and on the TensorBoard events, and checks that both agree with the callback's last fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from rl_vs_trl import hf_char_tokenizer, warmed_policy  # noqa: E402  (the same export as the benchmark)

from scalerl.build import build_length_control, build_task  # noqa: E402
from scalerl.config import load_config  # noqa: E402
from scalerl.integrations.trl import AXES, ForecastCallback  # noqa: E402
from scalerl.models.tiny import to_hf_llama  # noqa: E402
from scalerl.models.tokenizer import CharTokenizer  # noqa: E402


def run(out: Path, steps: int, eval_every: int, axis: str, overrides: list[str], threads: int,
        reward: str = "correct") -> ForecastCallback:
    """Train with TRL for ``steps`` steps with the forecast callback attached; returns the callback.

    ``reward``: ``correct`` (the task's verifier, 1 or 0: eval_reward is the held-out pass rate) or ``brevity``
    (1 − completion length / the length cap: a shaped reward that moves within a few steps even for an untrained
    model, which the short CI version uses)."""
    import torch
    from datasets import Dataset
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)
    cfg = load_config("scalerl", None, overrides)
    task = build_task(cfg.task)
    problems = {p.id: p for p in [*task.train_problems(), *task.val_problems()]}

    cap = build_length_control(cfg).max_new_tokens

    def correct(prompts: list, completions: list[str], problem_id: list[str], **_: Any) -> list[float]:
        return [1.0 if task.grade(problems[i], c) else 0.0 for i, c in zip(problem_id, completions)]

    def brevity(prompts: list, completions: list[str], completion_ids: list[list[int]], **_: Any) -> list[float]:
        return [1.0 - len(ids) / cap for ids in completion_ids]

    def dataset(split: list) -> Any:
        return Dataset.from_list([{"prompt": p.prompt, "problem_id": p.id} for p in split])

    batch = cfg.batch.prompts * cfg.batch.generations
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    ckpt = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    args = GRPOConfig(
        output_dir=str(out), use_cpu=True, report_to=["tensorboard"], seed=cfg.seed, data_seed=cfg.seed,
        max_steps=steps, per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
        num_generations=cfg.batch.generations, steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=cap, temperature=1.0, top_k=0, top_p=1.0,
        beta=0.0, loss_type="cispo", learning_rate=cfg.optim.lr, bf16=False, logging_steps=1,
        eval_strategy="steps", eval_steps=eval_every, save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, **{ckpt: False},
    )
    # the evaluation at step 0 comes before TensorBoardCallback.on_train_begin picks output_dir/runs/: name it
    # here (the callback reads the variable when the trainer builds it)
    saved = os.environ.get("TENSORBOARD_LOGGING_DIR")
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(out / "runs")
    try:
        trainer = GRPOTrainer(
            model=to_hf_llama(warmed_policy(cfg, task)), reward_funcs={"correct": correct, "brevity": brevity}[reward],
            args=args, train_dataset=dataset(task.train_problems()), eval_dataset=dataset(task.val_problems()),
            processing_class=hf_char_tokenizer(CharTokenizer()),
        )
    finally:
        if saved is None:
            del os.environ["TENSORBOARD_LOGGING_DIR"]
        else:
            os.environ["TENSORBOARD_LOGGING_DIR"] = saved
    callback = ForecastCallback(metric="eval_reward", axis=axis).attach(trainer)
    trainer.evaluate()  # the reward at zero training compute: R0 of Eq. 1
    trainer.train()
    trainer.save_state()  # output_dir/trainer_state.json
    return callback


def scalerl_fit(path: Path, x: str, y: str) -> dict[str, Any] | str:
    """``scalerl fit PATH --json`` as a user runs it, in a subprocess: the fit, or its one-line error."""
    cmd = [sys.executable, "-m", "scalerl", "fit", str(path), "--x", x, "--y", y, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(done.stdout)["fits"][0] if done.returncode == 0 else done.stderr.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="TRL's output directory")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--axis", choices=list(AXES), default="flops")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reward", choices=["correct", "brevity"], default="correct")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="scalerl config override (model, task, batch, lr)")
    a = ap.parse_args()
    callback = run(a.out, a.steps, a.eval_every, a.axis, a.overrides, a.threads, a.reward)
    last = callback.last
    print("callback's last forecast:", json.dumps({k: round(v, 6) for k, v in last.items()}))
    x = AXES[a.axis]
    # TensorBoard stores float32: its fit agrees to float32 precision, trainer_state.json's exactly
    for source, tol in ((a.out / "trainer_state.json", 1e-6), (a.out / "runs", 1e-3)):
        fit = scalerl_fit(source, x, "eval_reward")
        if isinstance(fit, str):
            print(f"scalerl fit {source}: {fit}")
            continue
        agree = "forecast/A" in last and abs(fit["A"] - last["forecast/A"]) <= tol * max(1.0, abs(fit["A"]))
        print(f"scalerl fit {source}: A = {fit['A']:.6f} {fit['A_ci']}, B = {fit['B']:.4f}, "
              f"identified = {fit['identified']}, n = {fit['n_points']} -> "
              f"{'agrees' if agree else 'DISAGREES'} with the callback")


if __name__ == "__main__":
    main()
