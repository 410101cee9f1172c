"""The built-in tokenizer: fixed ids, greedy longest match, exact round trip, a short interruption phrase."""

import pytest

from scalerl.errors import UserError
from scalerl.models.base import Tokenizer
from scalerl.models.tokenizer import INTERRUPTION_PHRASE, CharTokenizer


def test_round_trip_every_printable_character_and_newline():
    tok = CharTokenizer()
    text = "".join(chr(c) for c in range(32, 127)) + "\nline two\n\n<think>1+2=3</think>3"
    assert tok.decode(tok.encode(text)) == text
    assert isinstance(tok, Tokenizer)


def test_fixed_ids_and_specials():
    a, b = CharTokenizer(), CharTokenizer()
    assert a.tokens == b.tokens and a.vocab_size == len(a.tokens)
    assert (a.pad_id, a.bos_id, a.eos_id) == (0, 1, 2)
    assert a.decode([a.pad_id, a.bos_id, a.eos_id]) == "<pad><bos><eos>"
    # a text that spells a special token is characters, not the special (it must not end a generation)
    assert a.encode("<eos>") == [a.token_id(c) for c in "<eos>"]
    assert len(set(a.tokens)) == a.vocab_size


def test_phrase_encodes_to_its_words():
    tok = CharTokenizer()
    pieces = [tok.decode([i]) for i in tok.encode(INTERRUPTION_PHRASE)]
    assert pieces == [
        "Okay,", " time", " is", " up.", " Let", " me", " stop", " thinking", " and", " formulate", " a",
        " final", " answer", " now.", " ", "</think>",
    ]
    assert [tok.decode([i]) for i in tok.encode(" Okay, time")] == [" Okay,", " time"]


def test_greedy_longest_match():
    tok = CharTokenizer()
    assert tok.encode("</think>") == [tok.token_id("</think>")]
    assert tok.encode("</thin") == [tok.token_id(c) for c in "</thin"]  # no partial multi-char match
    assert [tok.decode([i]) for i in tok.encode(" an answer. and a")] == [" an", " answer.", " and", " a"]
    assert [tok.decode([i]) for i in tok.encode(" timely")] == [" time", "l", "y"]


def test_unknown_character_is_a_user_error():
    with pytest.raises(UserError, match="cannot encode"):
        CharTokenizer().encode("naïve")
