"""Readers for what runs leave behind (docs/architecture.md): metrics.jsonl, run directories, CSV (W&B exports too) and
TensorBoard events."""

import json
import time

import numpy as np
import pytest

from scalerl.curves import load_series
from scalerl.errors import UserError


def _metrics(path, n=6, truncate=False):
    lines = []
    for step in range(n):
        rec = {"step": step, "compute/device_hours": step * 0.5, "train/reward_mean": 0.1 * step}
        if step % 2 == 0:
            rec["val/pass_rate"] = 0.2 + 0.05 * step
        lines.append(json.dumps(rec))
    text = "\n".join(lines) + "\n"
    if truncate:
        text += '{"step": 99, "compute/device_ho'
    path.write_text(text)
    return path


def test_metrics_jsonl_skips_non_eval_lines_and_a_truncated_last_line(tmp_path):
    s = load_series(_metrics(tmp_path / "metrics.jsonl", truncate=True))
    assert s.x.tolist() == [0.0, 1.0, 2.0] and s.y.tolist() == pytest.approx([0.2, 0.3, 0.4])
    assert s.rows.tolist() == [1, 3, 5]
    assert any("truncated last line (line 7)" in n for n in s.notes)


def test_run_directory_reads_its_metrics(tmp_path):
    _metrics(tmp_path / "metrics.jsonl")
    s = load_series(tmp_path, y="train/reward_mean")
    assert s.x.size == 6 and s.source.endswith("metrics.jsonl")


def test_a_corrupt_line_in_the_middle_is_an_error(tmp_path):
    p = _metrics(tmp_path / "m.jsonl")
    lines = p.read_text().splitlines()
    lines[2] = "{not json"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="line 3 is not valid JSON"):
        load_series(p)


def test_csv_and_wandb_chart_export(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("step,compute/device_hours,val/pass_rate\n0,0,0.1\n1,10,0.2\n2,20,\n3,30,0.35\n")
    s = load_series(p)
    assert s.x.tolist() == [0, 10, 30] and s.rows.tolist() == [2, 3, 5]  # the empty cell: not logged there
    w = tmp_path / "wandb.csv"
    w.write_text('"Step","my-run - val/pass_rate","my-run - val/pass_rate__MIN"\n1,0.2,0.1\n2,0.3,0.2\n')
    s = load_series(w, x="Step")
    assert s.y.tolist() == [0.2, 0.3]


def test_non_numeric_and_nan_rows_are_dropped_and_named(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("c,r\n1,0.1\n2,abc\n3,nan\n4,0.4\n")
    s = load_series(p, x="c", y="r")
    assert s.x.tolist() == [1, 4]
    assert any("dropped 2 row(s)" in n and "3, 4" in n for n in s.notes)
    q = tmp_path / "bad.csv"
    q.write_text("c,r\n1,x\n2,NaN\n")
    with pytest.raises(UserError, match="no numeric"):
        load_series(q, x="c", y="r")


def test_unknown_column_lists_the_columns(tmp_path):
    p = _metrics(tmp_path / "metrics.jsonl")
    with pytest.raises(UserError, match=r"no column 'val/acc'; the columns there are: step, compute/device_hours"):
        load_series(p, y="val/acc")


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_series(tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(UserError, match="empty"):
        load_series(tmp_path / "empty.csv")
    with pytest.raises(UserError, match="without metrics.jsonl"):
        load_series(tmp_path)


def test_tensorboard_events_joined_on_step(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    tb = tmp_path / "tb"  # where scalerl's run log keeps them
    w = EventFileWriter(str(tb))
    for step in range(0, 50, 10):
        vals = [("compute/device_hours", step * 0.25)] + ([("val/pass_rate", 0.2 + step / 100)] if step != 20 else [])
        for tag, v in vals:
            summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)])
            w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summ))
    w.close()
    s = load_series(tmp_path)
    assert s.x.tolist() == pytest.approx([0, 2.5, 7.5, 10]) and s.y.tolist() == pytest.approx([0.2, 0.3, 0.5, 0.6])
    by_step = load_series(tmp_path, x="step")
    assert by_step.x.tolist() == [0, 10, 30, 40]
    with pytest.raises(UserError, match="no column 'loss'.*val/pass_rate"):
        load_series(tmp_path, y="loss")
    f = next(tb.glob("events.out.tfevents*"))
    assert np.array_equal(load_series(f).y, s.y) and np.array_equal(load_series(tb).y, s.y)


def test_verl_file_logger_lines(tmp_path):
    # verl/utils/tracking.py FileLogger.log (verl-project/verl, checked at 047621b): one line per Tracking.log call,
    # orjson.dumps({"step": step, "data": data}) + b"\n" -- orjson's output is json.dumps with compact separators.
    # Validation metrics arrive in their own log call at the step they were computed (RayPPOTrainer.fit).
    path = tmp_path / "GSM8K" / "qwen-grpo.jsonl"  # $VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl
    path.parent.mkdir()
    lines = []
    for step in range(0, 60, 10):
        if step:
            train = {"training/global_step": step, "perf/total_num_tokens": 4096 * step, "critic/score/mean": 0.01 * step}
            lines.append({"step": step, "data": train})
        lines.append({"step": step, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.1 + step / 200}})
    path.write_bytes(b"".join(json.dumps(rec, separators=(",", ":")).encode() + b"\n" for rec in lines))
    s = load_series(path, x="step", y="val-core/openai/gsm8k/reward/mean@1")
    assert s.x.tolist() == [0, 10, 20, 30, 40, 50] and s.y.tolist() == pytest.approx([0.1, 0.15, 0.2, 0.25, 0.3, 0.35])
    t = load_series(path, x="perf/total_num_tokens", y="critic/score/mean")
    assert t.x.tolist() == [40960, 81920, 122880, 163840, 204800]
    with pytest.raises(UserError, match="no column 'compute/device_hours'.*training/global_step"):
        load_series(path)


def test_openrlhf_tensorboard_logger_events(tmp_path):
    # OpenRLHF writes files only through TensorBoard: openrlhf/trainer/ppo_utils/loggers.py TensorboardLogger
    # (OpenRLHF/OpenRLHF, checked at 82c060e): SummaryWriter(log_dir=<use_tensorboard>/<wandb_run_name>),
    # add_scalar(f"train/{k}", v, global_step) for each logged value, add_text for generated samples.
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "tb_logs"
    writer = SummaryWriter(log_dir=str(root / "qwen-ppo"))
    for global_step in range(1, 7):
        logs = {"reward": 0.1 * global_step, "policy_loss": 1.0 / global_step, "response_length": 100 + global_step}
        for k, v in logs.items():
            writer.add_scalar(f"train/{k}", v, global_step)
        writer.add_text("train/generated_samples", f"Sample:\\n2+2=4\\n\\nReward: {0.1 * global_step:.4f}", global_step)
    writer.close()
    s = load_series(root, x="step", y="train/reward")  # the folder above the run's folder
    assert s.x.tolist() == [1, 2, 3, 4, 5, 6] and s.y.tolist() == pytest.approx([0.1 * i for i in range(1, 7)])
    assert load_series(root, x="step", y="reward").y.tolist() == s.y.tolist()  # HF/OpenRLHF's train/ prefix


def test_foreign_and_broken_trainer_state_files_are_one_line_errors(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}, indent=2))
    with pytest.raises(UserError, match="config.json: a JSON document without a log_history list"):
        load_series(config)
    empty = tmp_path / "trainer_state.json"
    empty.write_text(json.dumps({"global_step": 0, "log_history": []}, indent=2))
    with pytest.raises(UserError, match="log_history is empty"):
        load_series(empty)
    empty.write_text(json.dumps({"log_history": [{"loss": 1.0}]}, indent=2))
    with pytest.raises(UserError, match="log_history entry 1 is not an object with a step"):
        load_series(empty)
    two = tmp_path / "two"
    for run in ("a", "b"):
        (two / run).mkdir(parents=True)
        (two / run / "events.out.tfevents.1.host").write_bytes(b"")
    with pytest.raises(UserError, match="TensorBoard events in several folders"):
        load_series(two)


# verl's console logger (trainer.logger=['console']): lines of a real run's output, as printed (the README of
# johnson7788/RLDecisionAgent at 12ff6dbe, backend/char_count: a GRPO run of SmolLM2-135M and its SFT run; the
# GRPO step lines are cut to a few of their pairs, the rest of each line as printed)
VERL_CONSOLE = """\
2025-08-02 00:35:19,831 INFO worker.py:1879 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265
(TaskRunner pid=247607) TaskRunner hostname: yaqiyun-SYS-4028GR-TR2, PID: 247607
(TaskRunner pid=247607)  "'val-core/char_count/reward/best@3/std': 0.0, "
(TaskRunner pid=247607) step:0 - val-aux/char_count/reward/mean@1:0.121524201853759 - val-core/char_count/reward/mean@3:0.0
Training Progress:   1%|          | 1/140 [00:49<1:53:43, 49.09s/it]
(TaskRunner pid=247607) step:1 - global_seqlen/min:159906 - actor/entropy:0.09767807275056839 - actor/pg_loss:-0.0036091046008680547 - actor/lr:1e-06 - training/global_step:1 - training/epoch:0 - critic/score/mean:0.0888671875 - timing_s/step:48.7025266494602
(TaskRunner pid=247607) step:2 - global_seqlen/min:160112 - actor/pg_loss:0.0012 - training/global_step:2 - critic/score/mean:0.1015625 - timing_s/step:nan
(TaskRunner pid=247607) step:5 - training/global_step:5 - critic/score/mean:0.125 - val-core/char_count/reward/mean@3:0.25
Epoch 3/3:  97%|███████▋  | 34/35 [07:32<00:13, 13.14s/it]step:105 - train/loss:0.06290543079376221 - train/lr(1e-3):0.0
step:105 - val/loss:0.058481086045503616
"""


def test_verl_console_log_lines(tmp_path):
    path = tmp_path / "verl_demo.log"
    path.write_text(VERL_CONSOLE, encoding="utf-8")
    val = load_series(path, x="step", y="val-core/char_count/reward/mean@3")
    assert val.x.tolist() == [0, 5] and val.y.tolist() == [0.0, 0.25] and val.rows.tolist() == [4, 8]
    # "training/global_step:1" inside a line is a pair, not a step line; a negative value and 1e-06 are numbers
    score = load_series(path, x="training/global_step", y="critic/score/mean")
    assert score.x.tolist() == [1, 2, 5] and score.y.tolist() == [0.0888671875, 0.1015625, 0.125]
    assert load_series(path, x="step", y="actor/pg_loss").y.tolist() == [-0.0036091046008680547, 0.0012]
    assert load_series(path, x="step", y="actor/lr").y.tolist() == [1e-06]
    # a NaN is dropped and named; a step line after a tqdm bar, and two lines of one step, merge into one row
    t = load_series(path, x="step", y="timing_s/step")
    assert t.x.tolist() == [1] and any("dropped 1 row" in n and "7" in n for n in t.notes)
    sft = load_series(path, x="train/loss", y="val/loss")
    assert sft.x.tolist() == [0.06290543079376221] and sft.y.tolist() == [0.058481086045503616]
    assert load_series(path, x="step", y="train/lr(1e-3)").y.tolist() == [0.0]
    with pytest.raises(UserError, match="no column 'val-core/openai/gsm8k/reward/mean@1'.*val-core/char_count"):
        load_series(path, x="step", y="val-core/openai/gsm8k/reward/mean@1")


def test_a_text_file_without_step_lines_is_still_read_as_a_csv(tmp_path):
    path = tmp_path / "export.txt"
    path.write_text("step,value\n1,0.5\n2,0.6\n")
    assert load_series(path, x="step", y="value").y.tolist() == [0.5, 0.6]
    csv = tmp_path / "odd.csv"  # a CSV is never read as a console log, whatever its cells hold
    csv.write_text("step,note\n1,step:3 - x:1\n")
    with pytest.raises(UserError, match="no column 'x'"):
        load_series(csv, x="step", y="x")


def test_a_wandb_chart_export_of_several_runs_asks_which_run(tmp_path):
    path = tmp_path / "chart.csv"
    path.write_text("Step,grpo-a - val/acc,grpo-a - val/acc__MIN,grpo-b - val/acc\n1,0.5,0.4,0.6\n2,0.55,0.5,0.65\n")
    with pytest.raises(UserError, match=r"several runs log 'val/acc' \('grpo-a - val/acc', 'grpo-b - val/acc'\); give "
                                        r"the whole column name") as info:
        load_series(path, x="Step", y="val/acc")
    assert "\n" not in str(info.value)
    assert load_series(path, x="Step", y="grpo-b - val/acc").y.tolist() == [0.6, 0.65]


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_of_records_is_read_like_json_lines(tmp_path, indent):
    """A W&B ``run.history()`` saved with ``to_json(orient="records")`` (one line) or ``json.dump(..., indent=2)``:
    one row per record; a record without the metric (a training-only row) is skipped."""
    rows = [{"_step": 0, "val/acc": 0.31}, {"_step": 5, "train/loss": 0.9}, {"_step": 10, "val/acc": 0.42},
            {"_step": 20, "val/acc": None}]
    path = tmp_path / "history"  # no suffix: read by its first character
    path.write_text(json.dumps(rows, indent=indent))
    s = load_series(path, x="_step", y="val/acc")
    assert s.x.tolist() == [0, 10] and s.y.tolist() == [0.31, 0.42] and s.rows.tolist() == [1, 3]
    with pytest.raises(UserError, match="no column 'step'.*_step, val/acc, train/loss"):
        load_series(path, x="step", y="val/acc")


def _trainer_state(path, steps):
    path.parent.mkdir(parents=True, exist_ok=True)
    history = [{"step": s, "eval_accuracy": 0.3 + 0.02 * s ** 0.5, "epoch": s / 100} for s in steps]
    path.write_text(json.dumps({"global_step": steps[-1], "log_history": history}, indent=2))


def test_an_hf_output_dir_mid_training_is_read_from_its_latest_checkpoint(tmp_path, capsys):
    """An HF/TRL output_dir has checkpoint-<step>/trainer_state.json for every save and a root trainer_state.json
    only once the script calls save_state() at the end: the directory is read from its latest checkpoint (by step:
    checkpoint-120 after checkpoint-30, which sorts after it as text), and named by the run, not "trainer_state"."""
    from test_cli_curves import run

    from scalerl.curves.plot import short_name

    for name, last in (("grpo-a", 120), ("grpo-b", 90)):
        for step in (30, last):
            _trainer_state(tmp_path / name / f"checkpoint-{step}" / "trainer_state.json", list(range(5, step + 1, 5)))
    s = load_series(tmp_path / "grpo-a", x="step", y="eval_accuracy")
    assert s.x.tolist() == list(range(5, 121, 5)) and s.source.endswith("checkpoint-120/trainer_state.json")
    assert any("checkpoint-120" in n for n in s.notes)
    assert short_name(s.source) == "grpo-a" and short_name(str(tmp_path / "grpo-b" / "trainer_state.json")) == "grpo-b"
    code, out, err = run(["compare", tmp_path / "grpo-a", tmp_path / "grpo-b", "--x", "step", "--y", "eval_accuracy"],
                         capsys)
    assert code == 0, err
    assert "grpo-a" in out and "grpo-b" in out and "trainer_state" not in out
    # TensorBoard events beside the checkpoints are read instead (written at every log, the checkpoints only at saves)
    (tmp_path / "grpo-a" / "runs").mkdir()
    (tmp_path / "grpo-a" / "runs" / "events.out.tfevents.1.host").write_bytes(b"")
    with pytest.raises(UserError, match="TensorBoard"):
        load_series(tmp_path / "grpo-a", x="step", y="eval_accuracy")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=r"checkpoint-\*/trainer_state.json"):
        load_series(empty)


def test_nested_json_records_are_read_by_their_paths(tmp_path):
    """A logger that writes nested objects ({"eval": {"gsm8k": {"acc": ...}}}, JSON lines or an array of records)
    is read column by path, "eval/gsm8k/acc"; the columns were "step, train, eval" and no metric could be named."""
    rows = [{"step": s, "train": {"loss": 1.0 / (s + 1)}, "eval": {"gsm8k": {"acc": 0.3 + 0.001 * s}}}
            for s in range(0, 100, 10)]
    lines = tmp_path / "log.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    array = tmp_path / "history.json"
    array.write_text(json.dumps(rows))
    for path in (lines, array):
        s = load_series(path, x="step", y="eval/gsm8k/acc")
        assert s.x.tolist() == list(range(0, 100, 10)) and s.y.tolist() == pytest.approx([0.3 + 0.001 * x for x in s.x])
        assert load_series(path, x="step", y="train/loss").y[0] == 1.0
    with pytest.raises(UserError, match="eval/gsm8k/acc"):  # the error lists the leaves, not "eval"
        load_series(lines, x="step", y="eval/acc")


def test_a_csv_with_a_quote_left_open_is_one_line_naming_it(tmp_path):
    """An unclosed quote on line 2 swallows the rest of the file into one field, past the CSV reader's limit: a
    traceback (``_csv.Error: field larger than field limit``) reached the user."""
    bad = tmp_path / "unbalanced.csv"
    bad.write_text('step,acc,run\n0,0.1,"grpo\n' + "".join(f"{k},{0.1 + k / 1e5:.4f},grpo\n" for k in range(10, 100000, 10)))
    with pytest.raises(UserError, match=r"unbalanced.csv: not a readable CSV .*a quote opened and never closed"):
        load_series(bad, x="step", y="acc")
    long = tmp_path / "long.csv"
    long.write_text("step,acc,notes\n0,0.1,a\n1,0.2," + "x" * 200_000 + "\n2,0.3,b\n")
    with pytest.raises(UserError, match="field longer than the CSV reader takes"):
        load_series(long, x="step", y="acc")


def test_a_resumed_tensorboard_run_keeps_the_last_value_of_each_step(tmp_path):
    """A run resumed from a checkpoint logs its steps after the checkpoint again, in a second event file: the reader
    stopped with "compute is not increasing … sort them", which an event file cannot be."""
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "resumed"
    first = SummaryWriter(log_dir=str(run), filename_suffix=".a")
    for step in range(0, 260, 10):
        first.add_scalar("eval/acc", 0.2 + step / 1000, step)
    first.close()
    time.sleep(1.1)  # event files are named by the second they were opened in
    second = SummaryWriter(log_dir=str(run), filename_suffix=".b")
    for step in range(200, 410, 10):
        second.add_scalar("eval/acc", 0.3 + step / 1000, step)  # the resumed run's values differ
    second.close()
    s = load_series(run, x="step", y="eval/acc")
    assert list(s.x) == list(range(0, 410, 10))
    assert s.y[list(s.x).index(200)] == pytest.approx(0.5) and s.y[list(s.x).index(190)] == pytest.approx(0.39)
    assert any("6 step(s) logged more than once" in n for n in s.notes)


def test_add_scalars_subfolders_are_named_when_the_top_folder_has_none(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(tmp_path / "multi"))
    for step in range(5):
        w.add_scalars("acc", {"gsm8k": 0.1 * step, "math": 0.05 * step}, step)
    w.close()
    with pytest.raises(UserError, match=r"no scalar summaries .*subfolders acc_gsm8k, acc_math hold events"):
        load_series(tmp_path / "multi", x="step", y="acc")
    assert load_series(tmp_path / "multi" / "acc_gsm8k", x="step", y="acc").y[-1] == pytest.approx(0.4)


def test_a_file_too_large_for_memory_is_one_line(tmp_path, monkeypatch):
    """An 88 MB metrics.jsonl under a 900 MB memory limit ended in a MemoryError traceback."""
    from scalerl.curves import readers

    def exhausted(p, text):
        raise MemoryError

    monkeypatch.setattr(readers, "_jsonl_records", exhausted)
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"step": i, "acc": 0.1}) + "\n" for i in range(100)))
    with pytest.raises(UserError, match=r"big.jsonl: too large to read into memory \(0 MiB\)"):
        load_series(big, x="step", y="acc")
