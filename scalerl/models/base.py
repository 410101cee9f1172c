"""What the engines and the trainer need from a model and its tokenizer, whatever its origin
(the built-in tiny transformer or a Hugging Face causal LM)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    vocab_size: int
    pad_id: int
    eos_id: int
    bos_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...
