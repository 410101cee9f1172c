"""Readers for what runs leave behind (design.md): metrics.jsonl, run directories, CSV (W&B exports too) and
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
