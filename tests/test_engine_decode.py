"""The decode core shared by the built-in and the Hugging Face engines (``scalerl/engines/decode.py``): for a fixed
seed each engine gives exactly the samples it gave before the core was extracted (recorded in
``tests/data/engine_decode_golden.json``): the same sampled and forced tokens, interruptions (§2, App. A.10), stops,
truncations and policy versions across an in-flight weight update (PipelineRL, §3.1), and the same generator
log-probs.

The recorded values were produced on CPU by the engines' own decode loops before the refactor; regenerate them
only for a deliberate change of behaviour: ``python tests/test_engine_decode.py --record``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from scalerl.algo.length_control import Interruption, LengthControl
from scalerl.config import ModelConfig
from scalerl.models.tiny import build_tiny
from scalerl.models.tokenizer import CharTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # one thread: reductions in one order on any CPU
GOLDEN = Path(__file__).parent / "data" / "engine_decode_golden.json"
TOK = CharTokenizer()
MICRO = ModelConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=96)
PROMPTS = [TOK.encode("12+7="), TOK.encode("3*4="), TOK.encode("100-1=")]  # different lengths: left padding
LENGTH = Interruption(think_lo=3, think_hi=12, answer_budget=4, max_new_tokens=40, phrase=" ok stop </think>")
# (length, n, seed, ignore_eos, poll on which version 1 arrives or None)
CASES: dict[str, tuple[LengthControl, int, int, bool, int | None]] = {
    "interrupt_swap": (LENGTH, 3, 0, False, 6),
    "interrupt_ignore_eos": (LENGTH, 2, 1, True, None),
    "plain_swap": (LengthControl(max_new_tokens=16), 2, 2, False, 3),
}


def _source(state_dict: dict[str, torch.Tensor], at: int | None) -> Callable[[int], Any] | None:
    """A weight source publishing ``state_dict`` as version 1 on its ``at``-th poll (the 1st precedes the prefill)."""
    if at is None:
        return None
    polls = []

    def source(current: int):
        polls.append(current)
        return (1, state_dict) if len(polls) == at else None

    return source


def _engines() -> dict[str, tuple[Callable[[], Any], dict[str, torch.Tensor]]]:
    """Engine factories and the new weights (in each engine's own keys) for the in-flight update."""
    from scalerl.engines.builtin import BuiltinEngine

    out = {"builtin": (lambda: BuiltinEngine(build_tiny(MICRO, 0, TOK), TOK), build_tiny(MICRO, 1, TOK).state_dict())}
    try:
        import transformers  # noqa: F401
    except ImportError:
        return out
    from scalerl.engines.hf import HFEngine
    from scalerl.models.hf import HFPolicy
    from scalerl.models.tiny import to_hf_llama

    hf = lambda seed: HFPolicy(to_hf_llama(build_tiny(MICRO, seed, TOK)))  # noqa: E731
    out["hf"] = (lambda: HFEngine(hf(0), TOK), hf(1).state_dict())
    return out


def _outputs(name: str, case: str) -> dict[str, Any]:
    make, new = _engines()[name]
    length, n, seed, ignore_eos, at = CASES[case]
    engine = make()
    groups = engine.generate(PROMPTS, n, length, seed=seed, weight_source=_source(new, at), ignore_eos=ignore_eos)
    samples = [s for g in groups for s in g]
    return {
        "steps": engine.last_stats["steps"],
        "version": engine.version,
        "samples": [
            {"tokens": s.tokens, "forced": s.forced, "versions": s.versions, "logprobs": s.logprobs,
             "finished": s.finished, "truncated": s.truncated, "interrupted": s.interrupted,
             "think_budget": s.think_budget, "text": s.text}
            for s in samples
        ],
    }


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", ["builtin", "hf"])
def test_engine_gives_the_recorded_samples(name, case):
    if name == "hf":
        pytest.importorskip("transformers")
    want = json.loads(GOLDEN.read_text())[name][case]
    got = _outputs(name, case)
    assert (got["steps"], got["version"], len(got["samples"])) == (want["steps"], want["version"], len(want["samples"]))
    for g, w in zip(got["samples"], want["samples"]):
        lp_got, lp_want = g.pop("logprobs"), w.pop("logprobs")
        assert g == w
        torch.testing.assert_close(torch.tensor(lp_got), torch.tensor(lp_want), atol=1e-5, rtol=0)


def test_the_recorded_cases_exercise_every_path():
    """The golden runs interrupt, end on EOS, truncate, and switch policy version mid-sequence."""
    golden = json.loads(GOLDEN.read_text())
    samples = [s for engine in golden.values() for case in engine.values() for s in case["samples"]]
    assert all(any(s[flag] for s in samples) for flag in ("interrupted", "finished", "truncated"))
    assert any(0 in s["versions"] and 1 in s["versions"] for s in samples)
    assert any(any(s["forced"]) and s["truncated"] for s in samples)  # the answer budget cut an interrupted one
    assert golden["builtin"].keys() == golden["hf"].keys() == CASES.keys()


class _Scripted:
    """A ``KVBatch`` whose model writes ``x`` until sequence ``s`` has ``s`` tokens, then EOS (logits one-hot),
    logging every ``keep`` and ``step`` with the rows it holds."""

    def __init__(self, n_seq: int, log: list) -> None:
        self.rows, self.t, self.log = list(range(n_seq)), 0, log

    def logits(self) -> torch.Tensor:
        out = torch.full((len(self.rows), TOK.vocab_size), -1e4)
        for i, s in enumerate(self.rows):
            out[i, TOK.eos_id if self.t >= s else TOK.encode("x")[0]] = 0.0
        return out

    def keep(self, kept: torch.Tensor) -> None:
        self.rows = [self.rows[i] for i in kept.tolist()]
        self.log.append(("keep", list(self.rows)))

    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        self.log.append(("step", t, len(tokens)))
        self.t = t + 1
        return self.logits()


def _scripted_engine(compact_at: float, log: list):
    from scalerl.engines.decode import DecodeEngine

    class Scripted(DecodeEngine):
        def _device(self):
            return torch.device("cpu")

        def _max_new(self, length, prompt_len):
            return length.max_new_tokens

        def _prefill(self, ids, mask, n, max_new):
            batch = _Scripted(len(ids) * n, log)
            return batch.logits(), batch

    engine = Scripted(torch.nn.Linear(2, 2), TOK, fp32_head=False)
    engine.stop_ids, engine.compact_at = frozenset({TOK.eos_id}), compact_at
    return engine


@pytest.mark.parametrize("compact_at", [1.0, 0.5])
def test_core_polls_before_each_forward_and_drops_finished_rows_at_compact_at(compact_at):
    log: list = []
    engine = _scripted_engine(compact_at, log)
    polls = []
    source = lambda v: (polls.append(len(log)), None)[1]  # noqa: E731  # records how many events preceded it
    groups = engine.generate([[5]] * 4, 1, LengthControl(max_new_tokens=10), seed=0, weight_source=source)
    tokens = [s.tokens for g in groups for s in g]
    x = TOK.encode("x")[0]
    assert tokens == [[x] * s + [TOK.eos_id] for s in range(4)]
    assert all(s.finished and s.logprobs == [0.0] * len(s.tokens) for g in groups for s in g)
    assert engine.last_stats == {"steps": 4.0, "tokens": 10.0}
    steps = [e for e in log if e[0] == "step"]
    assert [e[1] for e in steps] == [0, 1, 2]  # sequence 3 ends at step 4: no forward after it
    # one poll before the prefill, then one right before every forward, after any compaction
    assert polls == [0] + [log.index(e) for e in steps]
    keeps = [e[1] for e in log if e[0] == "keep"]
    if compact_at == 1.0:  # a row leaves as soon as its sequence ends
        assert keeps == [[1, 2, 3], [2, 3], [3]] and [e[2] for e in steps] == [3, 2, 1]
    else:  # only once the live rows are at most half of the batch
        assert keeps == [[2, 3], [3]] and [e[2] for e in steps] == [4, 2, 1]


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    torch.set_num_threads(1)
    record = {name: {case: _outputs(name, case) for case in CASES} for name in _engines()}
    GOLDEN.write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN}")
