"""The built-in tiny transformer: a Llama-architecture decoder in plain torch, built for CPU speed.

RMSNorm, rotary position embeddings, SwiGLU MLP, no biases, tied input/output embeddings: the weights export
exactly to ``transformers.LlamaForCausalLM`` (:func:`to_hf_llama`), so what is trained here runs anywhere
Llama runs. Query/key/value and gate/up projections are fused (fewer kernel launches per decode step); the
export splits them. Generation uses a preallocated KV cache (:meth:`TinyLM.new_cache`, :meth:`TinyLM.prefill`,
:meth:`TinyLM.decode_step`), which keeps per-token overhead low for tiny models.
Position ids come from the attention mask, so left- and right-padded batches give the same logits for their
real tokens as unpadded sequences.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from scalerl.config import ModelConfig
from scalerl.errors import UserError
from scalerl.models.registry import EXPORTS, MODELS, HFExport, ModelBundle
from scalerl.models.tokenizer import CharTokenizer, hf_char_tokenizer


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    max_seq_len: int = 160
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dim(self) -> int:
        """Llama's 8/3 * d_model SwiGLU width, rounded up to a multiple of 32."""
        return 32 * math.ceil(8 * self.d_model / 3 / 32)


def _rope_tables(cfg: TinyConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos/sin [max_seq_len, head_dim], computed as transformers' Llama rotary embedding does."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float) / cfg.head_dim))
    freqs = torch.arange(cfg.max_seq_len, dtype=torch.float)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device), emb.sin().to(device)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool = False
) -> torch.Tensor:
    """Softmax attention of queries q [N, H, T, d] over keys and values k, v [N, H, S, d]: ``mask`` broadcastable
    to [N, H, T, S] (True = attend; every query attends to at least one key) or None, then ``causal`` (T = S)
    for plain causal attention. The same function as ``F.scaled_dot_product_attention``, which computes it
    without a mask, off a CPU and in half precision (its kernels keep the scores in float32). With a mask, on a
    CPU in float32, it runs as two batched matmuls around a softmax: at this model's sizes PyTorch's CPU kernel
    (flash attention, tiled for long sequences) takes 1.2-1.3x as long, a decode step's and a training forward's
    alike (``bench/attention.py``); for plain causal attention (the warm-up's) neither is reliably faster."""
    if mask is None or q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5).masked_fill_(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_dim, bias=False)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        kv: torch.Tensor | None = None,
        slot: int = 0,
    ) -> torch.Tensor:
        """x [N, T, d]; cos/sin [N, 1, T, head_dim]; mask broadcastable to [N, 1, T, S] (True = attend) or None
        for plain causal attention; kv [2, N, H, S_max, head_dim] is written at ``slot:slot+T`` and read up to it."""
        t = x.shape[1]
        q, k, v = self._qkv(x, cos, sin)
        if kv is not None:
            kv[0, :, :, slot : slot + t] = k
            kv[1, :, :, slot : slot + t] = v
            k, v = kv[0, :, :, : slot + t], kv[1, :, :, : slot + t]
        return self._finish(x, attend(q, k, v, mask, causal=t > 1))

    def forward_prefixed(
        self,
        xp: torch.Tensor,
        xc: torch.Tensor,
        rope_p: tuple[torch.Tensor, torch.Tensor],
        rope_c: tuple[torch.Tensor, torch.Tensor],
        mask_p: torch.Tensor | None,
        mask_c: torch.Tensor,
        group: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts xp [G, P, d] and continuations xc [N, C, d]; continuation i attends to the keys and values of
        prompt ``group[i]`` and to its own (``mask_c`` [N, 1, C, P + C]); ``mask_p`` as ``mask`` of forward."""
        qp, kp, vp = self._qkv(xp, *rope_p)
        ap = attend(qp, kp, vp, mask_p, causal=xp.shape[1] > 1)
        qc, kc, vc = self._qkv(xc, *rope_c)
        # index_select, not indexing: its backward (index_add) is several times faster on a CPU than index_put's
        k = torch.cat((kp.index_select(0, group), kc), dim=2)
        v = torch.cat((vp.index_select(0, group), vc), dim=2)
        ac = attend(qc, k, v, mask_c)
        return self._finish(xp, ap), self._finish(xc, ac)

    def _qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys (rotary applied) and values [N, H, T, head_dim] of x [N, T, d]."""
        n, t, _ = x.shape
        h = self.n_heads
        qkv = self.qkv(self.attn_norm(x)).view(n, t, 3 * h, self.head_dim).transpose(1, 2)
        qk = qkv[:, : 2 * h]
        qk = qk * cos + _rotate_half(qk) * sin  # rotary on queries and keys at once
        return qk[:, :h], qk[:, h:], qkv[:, 2 * h :]

    def _finish(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The residual after attention output ``a`` [N, H, T, head_dim], then the SwiGLU MLP's."""
        n, t, d = x.shape
        x = x + self.out(a.transpose(1, 2).reshape(n, t, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class TinyLM(nn.Module):
    """Decoder-only Llama-style language model. ``forward(input_ids, attention_mask) -> logits``."""

    def __init__(self, cfg: TinyConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_heads or cfg.head_dim % 2:
            raise UserError(
                f"model.d_model {cfg.d_model} must split into model.n_heads {cfg.n_heads} heads of even size"
            )
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied
        cos, sin = _rope_tables(cfg, self.embed.weight.device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights(generator)

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        # .to(bfloat16) must not round the rotary tables: rebuild them in float32 where the weights now live
        out = super()._apply(fn, recurse)
        self.rope_cos, self.rope_sin = _rope_tables(self.cfg, self.embed.weight.device)
        return out

    def _init_weights(self, generator: torch.Generator | None) -> None:
        std = 0.02
        nn.init.normal_(self.embed.weight, std=std, generator=generator)
        for block in self.blocks:
            for lin in (block.qkv, block.gate_up):
                nn.init.normal_(lin.weight, std=std, generator=generator)
            for lin in (block.out, block.down):  # residual-branch outputs, scaled by depth (GPT-2)
                nn.init.normal_(lin.weight, std=std / math.sqrt(2 * self.cfg.n_layers), generator=generator)

    # -- the HF-style accessors the FP32-head utility and the trainer use ------------------------------------
    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, head: nn.Module) -> None:
        self.lm_head = head

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [N, 1, T, head_dim] for positions [N, T] (all below max_seq_len)."""
        return self.rope_cos[positions].unsqueeze(1).to(dtype), self.rope_sin[positions].unsqueeze(1).to(dtype)

    def _trunk(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        cache: torch.Tensor | None = None,
        slot: int = 0,
    ) -> torch.Tensor:
        x = self.embed(input_ids)
        cos, sin = self._rope(positions, x.dtype)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, None if cache is None else cache[i], slot)
        return self.norm(x)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids [N, T] long, attention_mask [N, T] bool (True = real token; left or right padding) or None.
        Returns logits [N, T, V]; rows at padding positions are finite but meaningless."""
        positions, mask = self._positions_and_mask(input_ids, attention_mask)
        return self.lm_head(self._trunk(input_ids, positions, mask))

    def forward_prefixed(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, ids: torch.Tensor, group: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A training forward that runs each prompt once for all the sequences that continue it (a group of
        samples, §4's update): prompts [G, P] left-padded (prompt_mask True on real tokens); continuations
        ids [N, C] right-padded, row i continuing prompt ``group[i]``. Returns the logits at each prompt's last
        token [G, V] and at every continuation position [N, C, V]: for the real tokens, the values (and
        gradients) of ``forward`` on each whole sequence, at the prompt tokens' share of the work once per group."""
        n, c = ids.shape
        self.check_length(prompt_ids.shape[1] + c)
        pos_p, mask_p = self._positions_and_mask(prompt_ids, prompt_mask)
        pos_c = prompt_mask.sum(-1)[group][:, None] + torch.arange(c, device=ids.device)
        # continuation position j attends to its prompt's real tokens and to continuation positions <= j
        causal = torch.ones(c, c, dtype=torch.bool, device=ids.device).tril()
        mask_c = torch.cat((prompt_mask.bool()[group][:, None, :].expand(n, c, -1), causal.expand(n, c, c)), dim=-1)
        xp, xc = self.embed(prompt_ids), self.embed(ids)
        rope_p, rope_c = self._rope(pos_p, xp.dtype), self._rope(pos_c, xc.dtype)
        for block in self.blocks:
            xp, xc = block.forward_prefixed(xp, xc, rope_p, rope_c, mask_p, mask_c[:, None], group)
        return self.lm_head(self.norm(xp[:, -1])), self.lm_head(self.norm(xc))

    def check_length(self, length: int) -> None:
        """A UserError when ``length`` tokens do not fit the model's context."""
        if length > self.cfg.max_seq_len:
            raise UserError(
                f"sequence of {length} tokens exceeds model.max_seq_len {self.cfg.max_seq_len}; raise "
                "model.max_seq_len or shorten the prompts / the length budget"
            )

    def _positions_and_mask(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        n, t = input_ids.shape
        self.check_length(t)
        if attention_mask is None:
            return torch.arange(t, device=input_ids.device).expand(n, t), None
        valid = attention_mask.bool()
        if bool(valid[:, 0].all()) and not bool((valid[:, 1:] & ~valid[:, :-1]).any()):
            # right padding only: plain causal attention is exact for the real tokens, and much faster
            return torch.arange(t, device=input_ids.device).expand(n, t), None
        positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
        eye = torch.eye(t, dtype=torch.bool, device=input_ids.device)
        # a padding query attends to itself only, so its row is never empty (SDPA would give NaN)
        mask = (causal & valid[:, None, :]) | eye
        return positions, mask[:, None]

    # -- KV-cache generation -------------------------------------------------------------------------------
    def new_cache(self, batch: int, max_len: int) -> torch.Tensor:
        """A preallocated KV cache [layers, 2, batch, heads, max_len, head_dim]."""
        w = self.embed.weight
        c = self.cfg
        return torch.zeros(c.n_layers, 2, batch, c.n_heads, max_len, c.head_dim, dtype=w.dtype, device=w.device)

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        """Run left-padded prompts [N, P] through the model, filling cache slots 0..P-1.
        Returns the logits [N, V] at the last position (each prompt's last real token)."""
        positions, mask = self._positions_and_mask(input_ids, attention_mask)
        h = self._trunk(input_ids, positions, mask, cache, 0)
        return self.lm_head(h[:, -1])

    def decode_step(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor, slot: int, key_mask: torch.Tensor
    ) -> torch.Tensor:
        """One token per sequence: tokens [N] at rotary positions [N], written to cache slot ``slot``;
        key_mask [N, slot + 1] bool says which cache slots each sequence attends to. Returns logits [N, V]."""
        h = self._trunk(tokens[:, None], positions[:, None], key_mask[:, None, None, :], cache, slot)
        return self.lm_head(h[:, 0])


def tiny_config(cfg: ModelConfig, vocab_size: int) -> TinyConfig:
    return TinyConfig(
        vocab_size=vocab_size,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        max_seq_len=cfg.max_seq_len,
    )


def build_tiny(cfg: ModelConfig, seed: int, tokenizer: CharTokenizer | None = None) -> TinyLM:
    """A freshly initialised :class:`TinyLM` for the built-in tokenizer; the same seed gives the same weights."""
    tokenizer = tokenizer or CharTokenizer()
    model = TinyLM(tiny_config(cfg, tokenizer.vocab_size), generator=torch.Generator().manual_seed(seed))
    return model.to(getattr(torch, cfg.dtype))


@MODELS.register("tiny")
def tiny_factory(cfg: ModelConfig, seed: int) -> ModelBundle:
    """``model.name: tiny``: the built-in transformer and its tokenizer (the built-in KV-cache engine generates with it)."""
    tokenizer = CharTokenizer()
    model = build_tiny(cfg, seed, tokenizer)
    spec = {
        "n_params": sum(p.numel() for p in model.parameters()),
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "vocab_size": tokenizer.vocab_size,
    }
    return ModelBundle(
        model=model, tokenizer=tokenizer, family="builtin", spec=spec, hf_export=tiny_hf_export(model.cfg)
    )


def hf_llama_config(c: TinyConfig):  # -> transformers.LlamaConfig (imported lazily: an optional extra)
    """The ``LlamaConfig`` of the same network (tied head, no biases, SiLU gated MLP)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=c.ffn_dim,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_heads,
        head_dim=c.head_dim,
        max_position_embeddings=c.max_seq_len,
        rms_norm_eps=c.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def hf_llama_weights(state: Mapping[str, torch.Tensor], c: TinyConfig) -> dict[str, torch.Tensor]:
    """A ``TinyLM`` state dict under Llama checkpoint names: the fused qkv and gate/up projections are split
    (views, no copies); the head is tied, so there is no ``lm_head.weight``."""
    d, f = c.d_model, c.ffn_dim
    sd = {"model.embed_tokens.weight": state["embed.weight"], "model.norm.weight": state["norm.weight"]}
    for i in range(c.n_layers):
        b, p = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = state[b + "qkv.weight"].split(d)
        gate, up = state[b + "gate_up.weight"].split(f)
        sd.update({
            p + "input_layernorm.weight": state[b + "attn_norm.weight"],
            p + "self_attn.q_proj.weight": q,
            p + "self_attn.k_proj.weight": k,
            p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": state[b + "out.weight"],
            p + "post_attention_layernorm.weight": state[b + "mlp_norm.weight"],
            p + "mlp.gate_proj.weight": gate,
            p + "mlp.up_proj.weight": up,
            p + "mlp.down_proj.weight": state[b + "down.weight"],
        })
    return sd


def to_hf_llama(model: TinyLM):  # -> transformers.LlamaForCausalLM (imported lazily: an optional extra)
    """The same network as a ``transformers.LlamaForCausalLM`` with identical weights (fused projections split)."""
    from transformers import LlamaForCausalLM

    sd = hf_llama_weights(model.state_dict(), model.cfg)
    hf = LlamaForCausalLM(hf_llama_config(model.cfg)).to(model.embed.weight.dtype)
    missing, unexpected = hf.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"Llama export mismatch: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


def _save_hf_llama(model: torch.nn.Module, folder: Path) -> None:
    to_hf_llama(model).save_pretrained(folder)


def tiny_hf_export(c: TinyConfig) -> HFExport:
    """The tiny model as a Llama checkpoint (vLLM, ``scalerl export``), its tokenizer as a fast HF tokenizer."""
    return HFExport(save=_save_hf_llama, weights=functools.partial(hf_llama_weights, c=c),
                    tokenizer=hf_char_tokenizer)


@EXPORTS.register("builtin")
def load_tiny_export(folder: Path, cfg: ModelConfig, seed: int) -> ModelBundle:
    """A Llama folder ``scalerl export`` wrote from a tiny model, back as that ``TinyLM``: each exported tensor
    is copied into the view of the policy's weights that :func:`hf_llama_weights` gives it (the fused
    projections are filled part by part), so the policy is the exported one bit for bit."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    bundle = tiny_factory(cfg, seed)
    path = Path(folder) / "model.safetensors"
    try:
        tensors = load_file(path)
    except (OSError, SafetensorError) as exc:
        raise UserError(f"cannot read {path} ({exc}); export the run again") from None
    targets = hf_llama_weights(bundle.model.state_dict(), bundle.model.cfg)
    wrong = sorted(n for n, t in targets.items() if n not in tensors or tensors[n].shape != t.shape)
    if wrong:
        raise UserError(f"{path} does not hold the exported model's weights ({', '.join(wrong[:3])} missing or of "
                        "another shape); export the run again")
    with torch.no_grad():
        for name, target in targets.items():
            target.copy_(tensors[name])
    return bundle
