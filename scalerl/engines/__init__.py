"""Generation engines (docs/architecture.md): ``builtin`` (plain-torch KV-cache sampler for the tiny model, the CPU
default) and engines for Hugging Face models. All satisfy ``scalerl.engines.base.Engine``."""
