"""Problem sets from records: reading JSONL / JSON / parquet files, finding fields, the seeded train/validation
split, prompt templates, and the task object that holds the two splits.

§2.1, App. A.3: the RL prompts are a dataset with a held-out validation part (1,000 Polaris prompts) that is never
trained on. Here the split is a seeded shuffle: the same seed gives the same split on every run and machine.
"""

from __future__ import annotations

import json
import random
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


def _read_jsonl(path: Path) -> list[Any]:
    records = []
    for number, line in enumerate(read_user_text(path, "task data").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{number}: not valid JSON ({exc.msg}); each line must be one JSON object") from None
    return records


def _read_json_list(path: Path) -> list[Any]:
    try:
        data = json.loads(read_user_text(path, "task data"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
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


def field_of(record: dict[str, Any], aliases: Sequence[str], role: str, path: str | Path, index: int) -> Any:
    """The value of the first of ``aliases`` that ``record`` has (and is not null); a UserError naming the file,
    the record, the missing field and the fields present otherwise."""
    for name in aliases:
        if record.get(name) is not None:
            return record[name]
    present = ", ".join(sorted(map(str, record))) or "(none)"
    raise UserError(
        f"{path}: record {index + 1} has no {role} field (expected one of: {', '.join(aliases)}); fields present: {present}"
    )


def split(items: Sequence[T], seed: int, n_train: int, n_val: int, source: str) -> tuple[list[T], list[T]]:
    """Seeded split: shuffle the indices with ``seed``; the first ``n_val`` are the held-out validation split,
    the next ``n_train`` (or all that remain) the training split. Both keep the file order."""
    if len(items) <= n_val:
        raise UserError(
            f"{source}: {len(items)} problems leave none for training after holding out task.n_val={n_val}; "
            "lower task.n_val or give task.params.val_path"
        )
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    val = sorted(order[:n_val])
    train = sorted(order[n_val : n_val + n_train])
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
    seen: set[str] = set()
    for problem in problems:
        if problem.id in seen:
            raise UserError(f"{source}: duplicate problem id {problem.id!r}; ids must be unique (the curriculum keys on them)")
        seen.add(problem.id)


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
        train, val = split(problems, seed, n_train, n_val, str(path))
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
