"""The built-in tokenizer: printable ASCII characters plus a few multi-character tokens.

Small enough for a tiny model's embedding, general enough for any plain-text task. The multi-character tokens
are the thinking delimiters and the words of the ScaleRL interruption phrase (§4, App. A.10, "Okay, time is
up. Let me stop thinking and formulate a final answer now. </think>"), so a forced interruption costs ~16
tokens instead of ~80 characters. Encoding is greedy longest match; ``decode(encode(s)) == s`` for every string
of printable ASCII and newlines. The vocabulary is fixed, so ids are stable and there is nothing to save.
:func:`hf_char_tokenizer` gives the same tokenizer as a Hugging Face ``PreTrainedTokenizerFast`` (what an export
saves, ``scalerl/export.py``, and what TRL is given in ``bench/rl_vs_trl.py``).
"""

from __future__ import annotations

import re

from scalerl.errors import UserError

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
THINK, END_THINK = "<think>", "</think>"
INTERRUPTION_PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"

# Words of the phrase and of its variants (§4: A.10 drops "now"; the ICLR text says "an answer"), each with
# its leading space, as BPE vocabularies do. Listed explicitly so the id order never changes.
_WORDS = (
    "Okay,", " Okay,", " time", " is", " up.", " Let", " me", " stop", " thinking", " and", " formulate",
    " a", " an", " final", " answer", " answer.", " now.",
)
_CHARS = ("\n",) + tuple(chr(c) for c in range(32, 127))


class CharTokenizer:
    """Fixed vocabulary: ``<pad>``, ``<bos>``, ``<eos>``, ``\\n``, printable ASCII, ``<think>``,
    ``</think>``, then the interruption-phrase words.

    ``<pad>``/``<bos>``/``<eos>`` are never produced by :meth:`encode` (a text that happens to contain
    ``"<eos>"`` must not end a generation); :meth:`decode` renders every id, specials included, as its text.
    """

    def __init__(self) -> None:
        self.tokens: tuple[str, ...] = (PAD, BOS, EOS) + _CHARS + (THINK, END_THINK) + _WORDS
        self.vocab_size = len(self.tokens)
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self._ids = {tok: i for i, tok in enumerate(self.tokens)}
        # multi-character tokens by first character, longest first: the greedy longest match
        self._multi: dict[str, list[str]] = {}
        for tok in sorted(self.tokens[3 + len(_CHARS):], key=len, reverse=True):
            self._multi.setdefault(tok[0], []).append(tok)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        i, n = 0, len(text)
        while i < n:
            for tok in self._multi.get(text[i], ()):
                if text.startswith(tok, i):
                    ids.append(self._ids[tok])
                    i += len(tok)
                    break
            else:
                ch = text[i]
                if ch not in self._ids:
                    raise UserError(
                        f"text has character {ch!r} that the built-in tokenizer cannot encode "
                        "(it covers printable ASCII and newlines); use a Hugging Face model for other text"
                    )
                ids.append(self._ids[ch])
                i += 1
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(self.tokens[i] for i in ids)

    def token_id(self, token: str) -> int:
        """The id of one vocabulary entry (e.g. ``"</think>"``)."""
        return self._ids[token]


def hf_char_tokenizer(tok: CharTokenizer | None = None):  # -> transformers.PreTrainedTokenizerFast (lazy import)
    """The built-in tokenizer as a ``PreTrainedTokenizerFast``: same ids, same greedy longest match (a split
    regex whose alternatives are the multi-character tokens, longest first, then any single character), BOS
    added in front like ``encode_prompt``, decoding by plain concatenation. ``save_pretrained`` writes it as
    ``tokenizer.json``, which ``AutoTokenizer`` loads with nothing from scalerl imported.

    Like :meth:`CharTokenizer.encode`, it never makes ``<pad>``/``<bos>``/``<eos>`` from text
    (``split_special_tokens``, saved in ``tokenizer_config.json``): a prompt that spells ``<eos>`` is characters,
    not an end of sequence the policy never saw; only the post-processor's BOS is special."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = tok or CharTokenizer()
    multi = sorted((t for t in tok.tokens if len(t) > 1 and t not in (PAD, BOS, EOS)), key=len, reverse=True)
    pattern = "|".join(re.escape(t) for t in multi) + r"|[\s\S]"
    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tok.tokens)}, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, tok.bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS,
                                   split_special_tokens=True)
