"""``scalerl export``: the policy at a checkpoint as a Hugging Face model folder that transformers loads with
nothing from scalerl imported (``AutoModelForCausalLM.from_pretrained``, ``AutoTokenizer.from_pretrained``) and
vLLM serves (``vllm serve DIR``).

The folder holds the model's ``config.json`` and ``model.safetensors`` (the bundle's ``HFExport.save``: the
built-in model as a Llama, a Hugging Face model through ``save_pretrained``), its tokenizer (the built-in one as
a ``PreTrainedTokenizerFast``; an HF model's own, chat template included), a ``generation_config.json`` that
samples as the run did (temperature 1 over the whole vocabulary, §2; at most the run's ``max_new_tokens``), the
run card (``README.md``, ``scalerl/runcard.py``) and ``scalerl_export.json`` (the run's config, the step and the
model family, so ``scalerl eval`` loads the folder back as the same policy). The weights are the policy's: the
FP32 LM head (§3.2, Fig. 5b) is a way of computing the logits, not a weight, and a loader that wants it casts
the head to float32 itself.

The folder is assembled in a temporary sibling and renamed into place: a failed export leaves nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from scalerl.atomic import _umask, owner, remove_orphans
from scalerl.errors import UserError, check_writable_dir
from scalerl.runs import EXPORT_INFO, Source, load_policy


def check_out_dir(out: Path) -> None:
    """``--out`` must be a new or empty directory in a writable place (an export never mixes with other files)."""
    check_writable_dir(out, "--out")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"--out {out} is not empty; give a new or empty directory")


def generation_config(bundle: Any, cfg: Any, existing: Any = None) -> Any:
    """The sampling the run trained with (temperature 1, no top-k/top-p cut, §2) on top of the model's own
    generation config (its special tokens), capped at the run's ``max_new_tokens``."""
    from transformers import GenerationConfig

    from scalerl.build import build_length_control

    tok = bundle.tokenizer
    gen = existing if existing is not None else GenerationConfig()
    gen.update(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        max_new_tokens=int(build_length_control(cfg).max_new_tokens),
        eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
        **({} if tok.bos_id is None else {"bos_token_id": tok.bos_id}),
    )
    return gen


def _tokenizer_config(folder: Path) -> None:
    """Make the saved ``tokenizer_config.json`` load anywhere: the class transformers 4 and 5 both know (5 writes
    its new ``TokenizersBackend``), and the model's context as ``model_max_length`` where the tokenizer has none."""
    path, model = folder / "tokenizer_config.json", json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if config.get("model_max_length", 0) > 10**9 and model.get("max_position_embeddings"):  # transformers' "none"
        config["model_max_length"] = model["max_position_embeddings"]
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def write_export(source: Source, step: int, out: Path) -> Path:
    """Export ``source``'s policy at ``step`` to the new folder ``out``; returns ``out``."""
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    from scalerl.runcard import render_run_card

    out = Path(out)
    if source.kind != "run":
        raise UserError(f"{source.path} is a model folder, not a run directory; export a run (config.yaml, "
                        "checkpoints/), or use the folder as it is")
    check_out_dir(out)
    bundle = load_policy(source, step)
    if bundle.hf_export is None:
        raise UserError(f"model {source.cfg.model.name!r} has no Hugging Face export; nothing was written")
    anchor = next(p for p in [out.parent, *out.parent.parents] if p.exists())  # same file system as ``out``
    remove_orphans(anchor, f".{out.name}.")  # the staging folder of an export of the same name that was killed
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.{owner()}.", suffix=".export", dir=anchor))
    try:
        hf_logging.disable_progress_bar()  # no "Writing model shards" bar in the user's output
        bundle.hf_export.save(bundle.model, staged)
        hf_tokenizer = bundle.hf_export.tokenizer(bundle.tokenizer)
        hf_tokenizer.save_pretrained(staged)
        _tokenizer_config(staged)
        try:
            existing = GenerationConfig.from_pretrained(staged)
        except OSError:
            existing = None
        generation_config(bundle, source.cfg, existing).save_pretrained(staged)
        info = {"run": str(source.path.resolve()), "step": step, "family": bundle.family,
                "config": source.cfg.model_dump(mode="json")}
        (staged / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        card = render_run_card(source.cfg, source.path, export_step=step, export_dir=str(out))
        (staged / "README.md").write_text(card, encoding="utf-8")
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.is_dir():
            out.rmdir()  # empty (checked above): the staged folder takes its place
        for path in [staged, *staged.iterdir()]:  # mkdtemp's 0700 (and any 0600 file) as a plain mkdir/open makes them
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~_umask())
        os.rename(staged, out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return out
