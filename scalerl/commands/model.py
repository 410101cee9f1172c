"""``scalerl export`` and ``scalerl eval``: what a user takes away from a run (``scalerl/export.py``,
``scalerl/runs.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from scalerl.errors import UserError, check_writable_file


def print_results(results: list[dict[str, Any]], title: str) -> None:
    """One row per step: each pass rate, with the value the run logged at that step beside it where it did."""
    from rich.table import Table

    from scalerl.commands import print_table
    from scalerl.evaluate import pass_rate_keys

    columns = [k for k in pass_rate_keys(results[0]) if "/tier/" not in k]  # tiers: in the JSON
    table = Table(title=title, title_justify="left")
    table.add_column("step", justify="right")
    for key in columns:
        table.add_column(key.removesuffix("/pass_rate"), justify="right")
        if any(f"logged/{key}" in r for r in results):
            table.add_column("(logged)", justify="right")
    for r in results:
        cells = [str(r["step"])]
        for key in columns:
            cells.append(f"{r[key]:.4f}")
            if any(f"logged/{key}" in x for x in results):
                cells.append(f"{r[f'logged/{key}']:.4f}" if f"logged/{key}" in r else "-")
        table.add_row(*cells)
    print_table(table)


def register(app: typer.Typer) -> None:
    @app.command()
    def export(
        run: Path = typer.Argument(..., help="Run directory (config.yaml, checkpoints/)."),
        out: Path = typer.Option(..., "--out", help="New or empty folder for the Hugging Face model."),
        step: Optional[int] = typer.Option(None, "--step", help="Checkpoint step (default: the latest)."),
    ) -> None:
        """The policy at a checkpoint as a Hugging Face folder (config, safetensors, tokenizer, generation config,
        run card) for transformers, vLLM (`vllm serve DIR`) or a model hub."""
        from scalerl.export import check_out_dir, write_export
        from scalerl.runs import open_source, run_steps

        source = open_source(run, "RUN")
        check_out_dir(out)
        (chosen,) = run_steps(source, None if step is None else str(step))
        write_export(source, chosen, out)
        print(f"exported step {chosen} of {run} to {out} (load it with AutoModelForCausalLM.from_pretrained, "
              f"serve it with `vllm serve {out}`; the run card is {out / 'README.md'})")

    @app.command("eval")
    def eval_(
        source_path: Path = typer.Argument(..., metavar="RUN_OR_DIR",
                                           help="Run directory, folder from `scalerl export`, or any HF model folder."),
        step: Optional[str] = typer.Option(None, "--step", help="Checkpoint step(s): 40 or 20,40 (default: latest)."),
        every: bool = typer.Option(False, "--all", help="Every checkpoint the run holds."),
        task: Optional[str] = typer.Option(None, "--task", help="Evaluate on this task's validation split instead."),
        n_samples: Optional[int] = typer.Option(None, "--n-samples", help="mean@K (default: eval.n_samples)."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON to FILE (-: stdout)."),
    ) -> None:
        """mean@K on the validation split (and the run's downstream sets) for checkpoints or a model folder,
        as the run evaluated during training: the same steps give the numbers it logged."""
        from scalerl.atomic import write_json
        from scalerl.errors import check_number
        from scalerl.runs import eval_config, evaluate_steps, open_source, run_steps

        check_number("--n-samples", n_samples, low=1)
        if step is not None and every:
            raise UserError("--step and --all: give one of them")
        if json_out is not None and str(json_out) != "-":
            check_writable_file(json_out, "--json")
        source = open_source(source_path)
        steps = run_steps(source, step, every)
        cfg = eval_config(source.cfg, task, n_samples)
        results = evaluate_steps(source, steps, cfg)
        doc = {"source": str(source_path), "kind": source.kind, "task": cfg.task.model_dump(mode="json"),
               "n_samples": cfg.eval.n_samples, "evaluations": results}
        if json_out is not None and str(json_out) == "-":
            print(json.dumps(doc, indent=2))
            return
        if json_out is not None:
            write_json(json_out, doc)
        title = f"{source_path}: mean@{cfg.eval.n_samples} pass rates"
        print_results(results, title)
