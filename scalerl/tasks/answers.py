"""Finding the answer in a completion: drop the thinking, then find the final answer or the code.

App. A.3: math answers are checked (by Math-Verify) *after stripping* ``<think>…</think>``; code is checked
by running unit tests. With interruption length control (§2, App. A.10) an over-long completion ends its thinking with
"Okay, time is up. Let me stop thinking and formulate a final answer now. </think>", so the answer written after
that phrase sits after the last ``</think>`` like any other answer and is graded the same way.

Pure string functions; no dependency beyond the standard library.

Final-answer extraction order (the first rule that finds something wins; within a rule the *last* occurrence
wins, since models restate and correct themselves):

1. ``\\boxed{…}`` (or ``\\fbox{…}``), with nested braces;
2. ``<answer>…</answer>`` tags (the reasoning-gym convention);
3. "The answer is X" / "The final answer is X" (X: the rest of that line, a trailing period dropped);
4. "Answer: X" / "Final answer: X" at the start of a line;
5. the last number in the text (integers, decimals, ``a/b``, ``1,000``-style thousands).
"""

from __future__ import annotations

import re

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Every pattern runs in time linear in the text: a completion is the policy's choice, and a pattern that backtracks
# quadratically (two ``\s*`` side by side, ``\s*[:=]?\s*``, tried against 20,000 newlines after "answer:": 1.4 s,
# 200,000: minutes, in the trainer's process) would let one sample stall the run. So whitespace runs are never
# split between two quantifiers (``\s*(?:[*_]+\s*)?``, same language as ``\s*[*_]*\s*``), and the answer tags
# and code fences, whose lazy ``.*?`` rescanned the rest of the text from every unclosed opening, are paired in
# one pass (:func:`_tag_contents`, :func:`_fences`).
_ANSWER_TAG = re.compile(r"<(?P<close>/?)answer>", re.IGNORECASE)
_ANSWER_IS = re.compile(r"the\s+(?:final\s+)?answer\s+is\s*(?:[:=]\s*)?(?P<x>[^\n]+)", re.IGNORECASE)
_ANSWER_LINE = re.compile(
    r"^[ \t>*#_]*(?:final\s+)?answer\s*(?:[*_]+\s*)?[:=]\s*(?:[*_]+\s*)?(?P<x>[^\n]+)", re.IGNORECASE | re.MULTILINE
)
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+)?")
_FENCE_LANG = re.compile(r"[ \t]*(?P<lang>[\w+-]*)")
_PYTHON_LANGS = {"python", "py", "python3"}


def after_thinking(completion: str) -> str:
    """The part of ``completion`` that is graded: the text after the last ``</think>``.

    A completion that opened ``<think>`` and never closed it has no answer part (empty string): it was cut off
    while thinking. A completion with no think tags at all is graded whole."""
    close = completion.rfind(THINK_CLOSE)
    if close >= 0:
        return completion[close + len(THINK_CLOSE) :]
    if THINK_OPEN in completion:
        return ""
    return completion


_BRACE = re.compile(r"[{}]")


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` / ``\\fbox{…}`` with balanced braces; None if there is none (or it
    is never closed).

    One pass over the braces with a stack, so the time is linear in the text: scanning from every box to its
    end would take quadratic time on a completion of many unclosed boxes (40,000 characters: seconds)."""
    boxes = {match.end() - 1 for match in _BOXED.finditer(text)}  # where each box's opening brace is
    if not boxes:
        return None
    opened: list[int] = []
    found: tuple[int, int] | None = None  # (opening brace, closing brace) of the box that starts last
    for brace in _BRACE.finditer(text):
        pos = brace.start()
        if text[pos] == "{":
            opened.append(pos)
        elif opened:
            start = opened.pop()
            if start in boxes and (found is None or start > found[0]):
                found = (start, pos)
    return text[found[0] + 1 : found[1]].strip() if found is not None else None


def _clean(answer: str) -> str:
    answer = answer.strip()
    boxed = extract_boxed(answer)
    if boxed is not None:
        return boxed
    answer = answer.rstrip(" .").strip()
    if len(answer) >= 2 and answer.startswith("$") and answer.endswith("$"):
        answer = answer.strip("$").strip()
    return answer


def _last(pattern: re.Pattern[str], text: str, group: str | int) -> str | None:
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    value = _clean(matches[-1].group(group))
    return value or None


def _tag_contents(text: str) -> list[str]:
    """What ``<answer>(.*?)</answer>`` (case-insensitive, across lines) finds, left to right: each opening tag
    is paired with the first closing tag after it, and the search goes on after that closing tag. One pass over
    the tags, where the lazy pattern scanned to the end of the text from every opening tag that never closes."""
    found, start = [], None
    for tag in _ANSWER_TAG.finditer(text):
        if not tag.group("close"):
            if start is None:
                start = tag.end()
        elif start is not None:
            found.append(text[start : tag.start()])
            start = None
    return found


def extract_marked_answer(text: str) -> str | None:
    """The answer the model *marked* (rules 1-4 of the module docstring), or None."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed or None
    tags = _tag_contents(text)
    if tags and _clean(tags[-1]):  # an empty last tag falls through to the next rule, as before
        return _clean(tags[-1])
    for pattern in (_ANSWER_IS, _ANSWER_LINE):
        value = _last(pattern, text, "x")
        if value is not None:
            return value
    return None


def last_number(text: str) -> str | None:
    """The last number in ``text`` with thousands separators removed, or None."""
    matches = _NUMBER.findall(text)
    return matches[-1].replace(",", "") if matches else None


def extract_answer(text: str) -> str | None:
    """The final answer in ``text`` by the documented order (marked answer, else the last number)."""
    marked = extract_marked_answer(text)
    return marked if marked is not None else last_number(text)


def extract_code(text: str) -> str:
    """The program in ``text``: the last ```python fenced block, else the last untagged fenced block, else the
    whole text. A final fence left open (a truncated completion) counts up to the end of the text."""
    blocks = _fences(text)
    for wanted in (_PYTHON_LANGS, {""}):
        bodies = [body for lang, body in blocks if lang in wanted]
        if bodies:
            return bodies[-1]
    return text


def _fences(text: str) -> list[tuple[str, str]]:
    r"""(language in lower case, body) of each fenced block, left to right, as the pattern
    `````[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)(?:```|\Z)`` (dot matching newlines) finds them: a fence
    opens at a ```` ``` ```` with a newline after it (the language is the start of that line), and the block runs
    to the next ```` ``` ```` or the end of the text. One pass: the pattern rescanned the last line from every
    ```` ``` ```` on it that had no newline after it (and every language prefix of it), quadratic in its length."""
    blocks, pos = [], 0
    while True:
        fence = text.find("```", pos)
        if fence < 0:
            return blocks
        newline = text.find("\n", fence + 3)
        if newline < 0:  # no newline after this fence, nor after any later one: no block opens here or later
            return blocks
        lang = _FENCE_LANG.match(text, fence + 3, newline)
        end = text.find("```", newline + 1)
        body = text[newline + 1 :] if end < 0 else text[newline + 1 : end]
        blocks.append((lang.group("lang").lower() if lang else "", body))
        if end < 0:
            return blocks
        pos = end + 3
