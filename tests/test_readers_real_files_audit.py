"""The readers against files that other people's training runs wrote and committed (tests/data/readers/PROVENANCE.md).

Each test parses the file independently with json/csv and checks that ``load_series`` returns exactly those rows, in
file order, with the row numbers the messages use; quirk variants (one-line JSON, BOM, CRLF, NaN) are derived from the
same real files at test time.
"""

import csv
import json
import math
from pathlib import Path

import pytest

from scalerl.curves import load_series
from scalerl.errors import UserError
from test_cli_curves import run  # the CLI in process: (exit code, stdout, stderr)

DATA = Path(__file__).parent / "data" / "readers"


def _trainer_state_rows(path, x, y):
    """log_history merged on step (first entry's number), the (row, x, y) of the steps that have both keys."""
    merged = {}
    for i, entry in enumerate(json.loads(path.read_text())["log_history"]):
        merged.setdefault(entry["step"], (i + 1, {}))[1].update(entry)
    return [(row, rec[x], rec[y]) for row, rec in merged.values() if x in rec and y in rec]


def _assert_series(s, expected):
    assert s.rows.tolist() == [r for r, _, _ in expected]
    assert s.x.tolist() == [float(v) for _, v, _ in expected]
    assert s.y.tolist() == [float(v) for _, _, v in expected]




@pytest.mark.parametrize(
    "name, x, y, n",
    [
        ("trl_grpo_trainer_state.json", "step", "reward", 40),  # TRL GRPOTrainer, no eval entries
        ("trl_grpo_trainer_state.json", "epoch", "rewards/format_reward_fn/mean", 40),  # slashes in the key
        ("hf_trainer_eval_trainer_state.json", "step", "eval_accuracy", 62),  # eval_* entries share a step with loss
        ("hf_trainer_eval_trainer_state.json", "loss", "eval_accuracy", 62),  # joined on the step
        ("trl_orpo_trainer_state.json", "epoch", "rewards/accuracies", 33),
    ],
)
def test_trainer_state_files_read_the_rows_an_independent_parse_finds(name, x, y, n):
    path = DATA / name
    expected = _trainer_state_rows(path, x, y)
    assert len(expected) == n
    s = load_series(path, x=x, y=y)
    _assert_series(s, expected)
    assert s.notes == ()


def test_hf_trainer_final_summary_entry_joins_the_last_logged_step():
    # the Trainer's closing entry (train_loss, train_runtime, ...) has step == global_step; it merges into that row
    s = load_series(DATA / "hf_trainer_eval_trainer_state.json", x="step", y="train_loss")
    assert s.x.tolist() == [3140.0] and s.y.tolist() == pytest.approx([1.3949827522229237])


def test_llamafactory_trainer_log_jsonl_skips_the_closing_line_without_metrics():
    path = DATA / "llamafactory_trainer_log.jsonl"
    lines = path.read_text().splitlines()
    expected = [(i + 1, r["current_steps"], r["accuracy"]) for i, r in enumerate(map(json.loads, lines)) if "accuracy" in r]
    assert len(expected) == len(lines) - 1  # the last line (100%) carries no loss/accuracy
    s = load_series(path, x="current_steps", y="accuracy")
    _assert_series(s, expected)
    assert s.notes == ()


def test_wandb_run_history_csv_with_underscore_step():
    path = DATA / "wandb_run_history.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    expected = [(i + 2, r["_step"], r["resnet_reliance"]) for i, r in enumerate(rows)]
    s = load_series(path, x="_step", y="resnet_reliance")
    _assert_series(s, expected)
    with pytest.raises(UserError, match="no column 'Step'.*_step"):  # a chart export's Step is not in a history export
        load_series(path, x="Step", y="resnet_reliance")


def test_one_line_trainer_state_reads_like_the_pretty_printed_one(tmp_path):
    # json.dump(state) without indent (custom savers, jq -c): one line, still a trainer_state.json, not one JSON line
    real = DATA / "hf_trainer_eval_trainer_state.json"
    compact = tmp_path / "trainer_state.json"
    compact.write_text(json.dumps(json.loads(real.read_text())))
    assert "\n" not in compact.read_text().strip()
    s = load_series(compact, x="step", y="eval_accuracy")
    _assert_series(s, _trainer_state_rows(real, "step", "eval_accuracy"))
    assert load_series(tmp_path, x="step", y="eval_accuracy").x.size == 62  # the run directory too


def test_bom_and_crlf_do_not_change_what_is_read(tmp_path):
    for name, x, y in [("hf_trainer_eval_trainer_state.json", "step", "eval_accuracy"),
                       ("wandb_run_history.csv", "_step", "resnet_reliance"),
                       ("llamafactory_trainer_log.jsonl", "current_steps", "accuracy")]:
        real = DATA / name
        quirky = tmp_path / name
        quirky.write_bytes(b"\xef\xbb\xbf" + real.read_bytes().replace(b"\n", b"\r\n"))
        a, b = load_series(real, x=x, y=y), load_series(quirky, x=x, y=y)
        assert b.x.tolist() == a.x.tolist() and b.y.tolist() == a.y.tolist() and b.rows.tolist() == a.rows.tolist()


def test_nan_literals_and_wandb_nan_strings_are_dropped_and_named(tmp_path):
    doc = json.loads((DATA / "trl_grpo_trainer_state.json").read_text())
    doc["log_history"][3]["reward"] = math.nan  # json.dumps writes the NaN literal Python's json accepts
    p = tmp_path / "trainer_state.json"
    p.write_text(json.dumps(doc, indent=2))
    s = load_series(p, x="step", y="reward")
    assert s.x.size == 39 and 20.0 not in s.x.tolist()
    assert s.notes == (f"{p}: dropped 1 row(s) with non-numeric or NaN step/reward: 4",)

    lines = (DATA / "wandb_run_history.csv").read_text().splitlines()
    header = lines[0].split(",")
    col = header.index("resnet_reliance")
    for i, token in [(1, "NaN"), (2, "Infinity"), (3, "")]:  # W&B writes NaN/Infinity; an empty cell: not logged
        cells = lines[i].split(",")
        cells[col] = token
        lines[i] = ",".join(cells)
    c = tmp_path / "history.csv"
    c.write_text("\n".join(lines) + "\n")
    s = load_series(c, x="_step", y="resnet_reliance")
    assert s.x.size == 97 and s.rows.tolist()[:2] == [5, 6]
    assert s.notes == (f"{c}: dropped 2 row(s) with non-numeric or NaN _step/resnet_reliance: 2, 3",)


def test_cli_fits_the_real_files_and_problems_are_one_line_exit_2(tmp_path, capsys):
    code, out, _ = run(["fit", DATA / "hf_trainer_eval_trainer_state.json", "--x", "step", "--y", "eval_accuracy"],
                        capsys)
    assert code == 0 and "eval_accuracy" in out
    code, out, _ = run(["fit", DATA / "wandb_run_history.csv", "--x", "_step", "--y", "resnet_reliance"], capsys)
    assert code == 0
    code, out, err = run(["fit", DATA / "trl_grpo_trainer_state.json", "--x", "step", "--y", "eval_reward"], capsys)
    assert code == 2 and "Traceback" not in err + out
    assert "no column 'eval_reward'" in err and len(err.strip().splitlines()) == 1
    compact = tmp_path / "trainer_state.json"
    compact.write_text(json.dumps(json.loads((DATA / "hf_trainer_eval_trainer_state.json").read_text())))
    code, out, err = run(["fit", compact, "--x", "step", "--y", "eval_accuracy"], capsys)
    assert code == 0, err
