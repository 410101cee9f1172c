"""Models: the built-in tiny Llama-style transformer (``tiny``) and its tokenizer, the supervised warm-up,
the FP32 LM head (§3.2, Fig. 5b), and Hugging Face model loading. Importing ``scalerl.models.tiny`` registers the
``tiny`` entry in ``scalerl.models.registry.MODELS``."""
