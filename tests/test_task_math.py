"""Math tasks: answer extraction (scalerl.tasks.answers), Math-Verify grading after the thinking (App. A.3),
the interruption phrase (§4), file loading and field errors, the seeded held-out split, reasoning-gym."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from scalerl.errors import UserError
from scalerl.tasks.answers import after_thinking, extract_answer, extract_boxed, last_number
from scalerl.tasks.files import load_records
from scalerl.tasks.registry import TASKS

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tasks"
INTERRUPTION = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def numbered(n: int) -> list[dict]:
    return [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(n)]


# ------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $\boxed{42}$.", "42"),
        (r"\boxed{\frac{a}{\sqrt{b^{2}}}} is it", r"\frac{a}{\sqrt{b^{2}}}"),  # nested braces
        (r"first \boxed{1}, corrected: \boxed{2}", "2"),  # the last box wins
        (r"\fbox{7}", "7"),
        ("<answer>94*4 - 61 - 6</answer>", "94*4 - 61 - 6"),
        ("Thus the answer is 12.", "12"),
        (r"The final answer is $\frac{1}{2}$.", r"\frac{1}{2}"),
        ("the answer is 3.5", "3.5"),  # a decimal point is not a full stop
        ("**Answer:** -7", "-7"),
        ("Final answer: x = 3\n", "x = 3"),
        ("we get 1,024 apples and then 9 more, 1,033 in all", "1033"),  # last-number fallback
        ("ratio 3/4", "3/4"),
        ("no numbers here", None),
        (r"\boxed{unclosed 5", "5"),  # an unclosed box is no box; the last number remains
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_boxed_takes_priority_over_later_phrases():
    assert extract_answer(r"\boxed{4}. The answer is 5") == "4"
    assert extract_boxed("nothing boxed") is None
    assert last_number("-3 then 2.50") == "2.50"


def test_after_thinking():
    assert after_thinking("<think>a</think>b</think> final") == " final"
    assert after_thinking("<think>never closed \\boxed{3}") == ""  # cut off while thinking: no answer part
    assert after_thinking("no tags 4") == "no tags 4"


# ---------------------------------------------------------------------------------------------- grading


def test_math_verify_equivalences():
    pytest.importorskip("math_verify")
    from scalerl.tasks.math import answers_match, grade_math

    assert answers_match(r"\frac{1}{2}", "0.5")
    assert answers_match("0.5", r"\frac{1}{2}")
    assert answers_match("x^2+2x+1", "1 + 2x + x^2")
    assert answers_match(r"5\sqrt{2}", r"\sqrt{50}")
    assert not answers_match("42", "41")
    assert grade_math(r"\frac{1}{2}", r"<think>half of one</think> The answer is $\boxed{0.5}$")
    assert not grade_math("42", "<think>it is \\boxed{42}</think> I am not sure.")  # only the answer part counts
    assert not grade_math("42", "I have no idea")


def test_answer_after_the_interruption_phrase_is_graded():
    pytest.importorskip("math_verify")
    from scalerl.tasks.math import grade_math

    thinking = "<think>" + "Let me add these numbers step by step. " * 50
    assert grade_math("42", thinking + INTERRUPTION + " The answer is \\boxed{42}.")
    assert not grade_math("42", thinking + INTERRUPTION + " The answer is \\boxed{41}.")
    assert not grade_math("42", thinking + "so far 42 ...")  # interrupted without the phrase: no answer


def test_grading_in_a_worker_thread():
    # math-verify's timeout uses signal.alarm, which only works in the main thread
    pytest.importorskip("math_verify")
    from scalerl.tasks.math import grade_math

    results = []
    worker = threading.Thread(target=lambda: results.append(grade_math(r"\frac{3}{4}", r"\boxed{0.75}")))
    worker.start()
    worker.join()
    assert results == [True]


def test_example_file_gold_answers_grade_correct():
    pytest.importorskip("math_verify")
    task = TASKS.get("math")(seed=0, n_train=100, n_val=2, path=str(EXAMPLES / "math_tiny.jsonl"))
    problems = list(task.train_problems()) + list(task.val_problems())
    assert len(problems) == 8
    by_id = {p.id: p for p in problems}
    assert by_id["poly"].answer == "x^2+2x+1"  # a worked solution is reduced to its boxed answer
    assert by_id["mult"].answer == "84"  # a JSON number is an answer too
    for problem in problems:
        assert task.grade(problem, f"<think>...</think> The answer is $\\boxed{{{problem.answer}}}$."), problem.id
        assert not task.grade(problem, "<think>...</think> \\boxed{123456789}"), problem.id


# ------------------------------------------------------------------------------------- files and split


def test_missing_field_names_file_field_and_fields_present(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "result": "4"}])
    with pytest.raises(UserError) as err:
        TASKS.get("math")(seed=0, n_train=5, n_val=1, path=str(path))
    message = str(err.value)
    assert "bad.jsonl" in message and "record 2" in message and "answer" in message
    assert "fields present: question, result" in message
    assert "\n" not in message


def test_bad_files_are_user_errors(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "1+1?", "answer": "2"}\n{not json\n')
    with pytest.raises(UserError, match="broken.jsonl:2"):
        load_records(broken)
    with pytest.raises(UserError, match="not found"):
        load_records(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="unsupported"):
        load_records(write_jsonl(tmp_path / "data.txt", numbered(2)))
    with pytest.raises(UserError, match="n_val=5"):
        TASKS.get("math")(seed=0, n_train=5, n_val=5, path=str(write_jsonl(tmp_path / "few.jsonl", numbered(5))))


def test_bad_params_are_user_errors(tmp_path):
    path = str(write_jsonl(tmp_path / "p.jsonl", numbered(4)))
    make = TASKS.get("math")
    with pytest.raises(UserError, match="task.params.bogus: unknown field"):
        make(seed=0, n_train=2, n_val=1, path=path, bogus=1)
    with pytest.raises(UserError, match="needs path"):
        make(seed=0, n_train=2, n_val=1)
    with pytest.raises(UserError, match="must contain \\{question\\}"):
        make(seed=0, n_train=2, n_val=1, path=path, template="no placeholder")


def test_split_is_deterministic_held_out_and_seeded(tmp_path):
    pytest.importorskip("math_verify")
    path = str(write_jsonl(tmp_path / "p.jsonl", numbered(50)))

    def ids(seed: int) -> tuple[list[str], list[str]]:
        task = TASKS.get("math")(seed=seed, n_train=30, n_val=10, path=path)
        return [p.id for p in task.train_problems()], [p.id for p in task.val_problems()]

    train, val = ids(1)
    assert (train, val) == ids(1)
    assert len(train) == 30 and len(val) == 10 and not set(train) & set(val)
    assert ids(2)[1] != val
    assert train[0] == "p-" + train[0].split("-")[1]  # ids default to <file stem>-<line index>


def test_template_and_val_path(tmp_path):
    pytest.importorskip("math_verify")
    train_path = write_jsonl(tmp_path / "train.jsonl", numbered(6))
    val_path = write_jsonl(tmp_path / "val.jsonl", [{"problem": "What is 100 + 1?", "answer": "101"}])
    task = TASKS.get("math")(seed=0, n_train=10, n_val=5, path=str(train_path), val_path=str(val_path),
                             template="think_boxed")
    assert len(task.train_problems()) == 6 and [p.answer for p in task.val_problems()] == ["101"]
    assert task.val_problems()[0].prompt.startswith("What is 100 + 1?\n\nThink step by step inside <think>")
    custom = TASKS.get("math")(seed=0, n_train=10, n_val=1, path=str(train_path), template="Q: {question} Put it in \\boxed{}.")
    assert custom.train_problems()[0].prompt.endswith("? Put it in \\boxed{}.")
    with pytest.raises(UserError, match="held out"):
        TASKS.get("math")(seed=0, n_train=10, n_val=1, path=str(train_path), val_path=str(train_path))


def test_parquet_file(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    pq.write_table(pa.Table.from_pylist(numbered(3)), tmp_path / "p.parquet")
    assert load_records(tmp_path / "p.parquet") == numbered(3)


# ----------------------------------------------------------------------------------------- reasoning-gym


@pytest.mark.parametrize("dataset", ["basic_arithmetic", "leg_counting", "countdown"])
def test_reasoning_gym_gold_answers_grade_correct(dataset):
    pytest.importorskip("reasoning_gym")
    task = TASKS.get("math")(seed=3, n_train=12, n_val=4, source="reasoning_gym", dataset=dataset)
    train, val = task.train_problems(), task.val_problems()
    assert len(val) == 4 and 0 < len(train) <= 12
    assert not {p.prompt for p in train} & {p.prompt for p in val}  # the validation split is held out
    for problem in list(train) + list(val):
        assert task.grade(problem, f"<think>working</think><answer>{problem.answer}</answer>"), problem.id
        assert task.grade(problem, f"<think>working</think>{problem.answer}"), problem.id
        assert not task.grade(problem, "<think>working</think><answer>no idea</answer>"), problem.id
    again = TASKS.get("reasoning_gym")(seed=3, n_train=12, n_val=4, dataset=dataset)
    assert [p.prompt for p in again.val_problems()] == [p.prompt for p in val]


def test_reasoning_gym_bad_dataset_is_a_user_error():
    pytest.importorskip("reasoning_gym")
    with pytest.raises(UserError, match="no_such_dataset"):
        TASKS.get("reasoning_gym")(seed=0, n_train=2, n_val=1, dataset="no_such_dataset")
    with pytest.raises(UserError, match="bogus"):
        TASKS.get("reasoning_gym")(seed=0, n_train=2, n_val=1, dataset="basic_arithmetic", dataset_config={"bogus": 1})


def test_a_byte_order_mark_is_not_content(tmp_path):
    # editors on some systems start UTF-8 files with a BOM: the data, configs and logs read the same without it
    from scalerl.curves.readers import load_series
    from scalerl.tasks.files import load_records

    data = tmp_path / "bom.jsonl"
    data.write_bytes("\ufeff".encode() + b'{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    assert [r["answer"] for r in load_records(data)] == ["2", "4"]
    log = tmp_path / "metrics.jsonl"
    lines = [f'{{"step": {i}, "compute/device_hours": {i / 10}, "val/pass_rate": {0.1 * i}}}' for i in range(8)]
    log.write_bytes("\ufeff".encode() + "\n".join(lines).encode())
    series = load_series(log, "compute/device_hours", "val/pass_rate")
    assert len(series.x) == 8
