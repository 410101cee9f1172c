"""Problem sets from records: reading JSONL / JSON / parquet files, finding fields, the seeded train/validation
split, prompt templates, and the task object that holds the two splits.

§2.1, App. A.3: the RL prompts are a dataset with a held-out validation part (1,000 Polaris prompts) that is never
trained on. Here the split is a seeded shuffle: the same seed gives the same split on every run and machine.
"""

from __future__ import annotations

import json
import math
import numbers
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

from scalerl.errors import UserError, read_user_text
from scalerl.tasks.base import Problem

T = TypeVar("T")
ParamsT = TypeVar("ParamsT", bound=BaseModel)

TEMPLATES: dict[str, str] = {
    "plain": "{question}",
    "think_boxed": (
        "{question}\n\nThink step by step inside <think> </think>, then write the final answer as \\boxed{...}."
    ),
    "think_code": (
        "{question}\n\nThink step by step inside <think> </think>, then give the complete solution in one "
        "```python code block."
    ),
}


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``.jsonl`` (one JSON object a line), ``.json`` (a list of objects) or ``.parquet`` file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"dataset file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        records = _read_parquet(path)
    elif suffix == ".jsonl":
        records = _read_jsonl(path)
    elif suffix == ".json":
        records = _read_json_list(path)
    else:
        raise UserError(f"{path}: unsupported dataset format {suffix or '(none)'}; use .jsonl, .json or .parquet")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise UserError(f"{path}: record {index + 1} is a {type(record).__name__}, not an object with fields")
    if not records:
        raise UserError(f"{path}: the file holds no records")
    return records


# JSON Lines ends a record at a line feed (a carriage return before it is fine). ``str.splitlines`` would also
# split at U+2028, U+2029 and U+0085, which JSON allows unescaped inside a string (``json.dumps(...,
# ensure_ascii=False)`` writes them so): a valid record holding one was cut in two and refused as "not valid JSON".
_JSONL_LINES = re.compile(r"\r\n|\r|\n")


def _loads(text: str, path: Path, number: int | None = None, hint: str = "") -> Any:
    """``json.loads(text)`` (line ``number`` of ``path``, or the whole file), or a UserError naming the file and
    line: invalid JSON, a number too long for Python to read (a ValueError: more than
    ``sys.get_int_max_str_digits()`` digits, 4,300 by default), or nesting too deep to read (a RecursionError).
    Before, the last two stopped the CLI with a traceback."""
    where = f"{path}:{number}" if number is not None else str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno if number is None else number}: not valid JSON ({exc.msg}){hint}") from None
    except ValueError:
        raise UserError(f"{where}: a number has too many digits to read; write it as a string") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply to read") from None


def _read_jsonl(path: Path) -> list[Any]:
    records = []
    for number, line in enumerate(_JSONL_LINES.split(read_user_text(path, "task data")), 1):
        if line.strip():
            records.append(_loads(line, path, number, "; each line must be one JSON object"))
    return records


def _read_json_list(path: Path) -> list[Any]:
    data = _loads(read_user_text(path, "task data"), path)
    if not isinstance(data, list):
        raise UserError(f"{path}: a .json dataset must hold a list of records, not a {type(data).__name__}")
    return data


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{path}: reading parquet needs pyarrow; install it with: pip install pyarrow") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types (ArrowInvalid, OSError) for a bad file
        raise UserError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None


# Roles whose value becomes a prompt or a reference answer as text: a list, an object or true/false there would be
# written into it as Python's repr (``"['a']"``), a problem no answer can match; it is refused instead.
TEXT_ROLES = frozenset({"question", "prompt", "answer"})


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def field_of(record: dict[str, Any], aliases: Sequence[str], role: str, path: str | Path, index: int) -> Any:
    """The value of the first of ``aliases`` that ``record`` has (and is not null or blank text); a UserError
    naming the file, the record, the missing field and the fields present otherwise. For a question, prompt or
    answer (:data:`TEXT_ROLES`) the value must be text or a finite number."""
    for name in aliases:
        value = record.get(name)
        if _blank(value):
            continue
        if role in TEXT_ROLES:
            is_number = isinstance(value, numbers.Number) and not isinstance(value, (bool, complex))
            finite = not isinstance(value, float) or math.isfinite(value)
            finite = finite and getattr(value, "is_finite", lambda: True)()  # decimal.Decimal (parquet)
            if not (isinstance(value, str) or is_number) or not finite:
                raise UserError(
                    f"{path}: record {index + 1}: field {name!r} is {type(value).__name__} {str(value)[:40]!r}; "
                    f"the {role} must be text or a finite number"
                )
        return value
    present = ", ".join(sorted(map(str, record))) or "(none)"
    empty = [name for name in aliases if name in record]
    blank = f" ({', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty)" if empty else ""
    raise UserError(
        f"{path}: record {index + 1} has no {role} field{blank} (expected one of: {', '.join(aliases)}); "
        f"fields present: {present}"
    )


def split(
    items: Sequence[T], seed: int, n_train: int, n_val: int, source: str, key: Callable[[T], Any] | None = None
) -> tuple[list[T], list[T]]:
    """Seeded split: shuffle the indices with ``seed``; the first ``n_val`` are the held-out validation split,
    the next ``n_train`` (or all that remain) the training split. Both keep the file order. With ``key`` (the
    prompt), an item whose key is also a validation item's is never trained on: it is passed over, so a problem
    that appears twice in a file cannot be in both splits (the validation set is held out, §2.1)."""
    if len(items) <= n_val:
        raise UserError(
            f"{source}: {len(items)} problems leave none for training after holding out task.n_val={n_val}; "
            "lower task.n_val or give task.params.val_path"
        )
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    val = sorted(order[:n_val])
    held = {key(items[i]) for i in val} if key is not None else set()
    rest = [i for i in order[n_val:] if key is None or key(items[i]) not in held]
    if not rest:
        raise UserError(f"{source}: every problem left for training is also in the validation split (the same "
                        "prompt); lower task.n_val or give task.params.val_path")
    train = sorted(rest[:n_train])
    return [items[i] for i in train], [items[i] for i in val]


def sample(items: Sequence[T], seed: int, n: int) -> list[T]:
    """``n`` items (all when there are fewer) chosen with ``seed``, in their original order."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in sorted(order[:n])]


def resolve_template(template: str | None) -> str:
    """A template by name (``TEMPLATES``) or a literal string holding ``{question}``."""
    if template is None:
        return TEMPLATES["plain"]
    if template in TEMPLATES:
        return TEMPLATES[template]
    if "{question}" not in template:
        raise UserError(
            f"task.params.template must contain {{question}} or be one of: {', '.join(sorted(TEMPLATES))}"
        )
    return template


def format_prompt(template: str, question: str) -> str:
    """``template`` with ``{question}`` replaced. Other braces are kept as written (``\\boxed{}`` needs no
    escaping), unlike ``str.format``."""
    return template.replace("{question}", question)


def check_unique_ids(problems: Sequence[Problem], source: str) -> None:
    """A UserError naming the two records (counted from 1, in file order) that share an id."""
    seen: dict[str, int] = {}
    for index, problem in enumerate(problems):
        if problem.id in seen:
            raise UserError(f"{source}: records {seen[problem.id] + 1} and {index + 1} have the same problem id "
                            f"{problem.id!r}; ids must be unique (the curriculum keys on them)")
        seen[problem.id] = index


@dataclass
class StaticTask:
    """A task whose problems are fixed at construction: the two splits plus a grading function (satisfies
    ``scalerl.tasks.base.Task``)."""

    name: str
    train: list[Problem]
    val: list[Problem]
    grader: Callable[[Problem, str], bool]

    def train_problems(self) -> Sequence[Problem]:
        return self.train

    def val_problems(self) -> Sequence[Problem]:
        return self.val

    def grade(self, problem: Problem, completion: str) -> bool:
        return self.grader(problem, completion)


def file_problems(
    path: str | Path,
    val_path: str | Path | None,
    seed: int,
    n_train: int,
    n_val: int,
    make: Callable[[dict[str, Any], str, int], Problem],
) -> tuple[list[Problem], list[Problem]]:
    """Train and validation problems from ``path`` (split by ``seed``), or validation from ``val_path`` when given.

    ``make(record, source, index)`` turns one record into a Problem (and raises the field errors)."""

    def problems_of(file: str | Path) -> list[Problem]:
        problems = [make(record, str(file), i) for i, record in enumerate(load_records(file))]
        check_unique_ids(problems, str(file))
        return problems

    problems = problems_of(path)
    if val_path is None:
        train, val = split(problems, seed, n_train, n_val, str(path), key=lambda p: p.prompt)
    else:
        train, val = sample(problems, seed, n_train), sample(problems_of(val_path), seed, n_val)
        overlap = {p.prompt for p in train} & {p.prompt for p in val}
        if overlap:
            example = sorted(overlap)[0][:60]
            raise UserError(f"{val_path}: {len(overlap)} problems also in {path} (e.g. {example!r}); the validation set must be held out")
    return train, val


def record_id(record: dict[str, Any], source: str, index: int) -> str:
    """The record's ``id`` field, else ``<file stem>-<index>`` (stable for a given file)."""
    if record.get("id") is not None:
        return str(record["id"])
    return f"{Path(source).stem}-{index}"


def validate_params(model: type[ParamsT], params: dict[str, Any], task: str) -> ParamsT:
    """``task.params`` checked against a pydantic model; a one-line UserError naming the bad field otherwise."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(["task.params", *(str(p) for p in err["loc"])])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        accepted = ", ".join(model.model_fields)
        raise UserError(f"task {task}: {where}: {msg} (accepted params: {accepted})") from None
