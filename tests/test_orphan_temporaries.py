"""What a writer killed mid-write leaves (an atomic write's temporary, an export's staging folder) is removed by
the next writer of the same target, and only if its writer no longer runs (scalerl/atomic.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from scalerl.atomic import owner, remove_orphans, write_json


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _stamp(pid: int, host: str | None = None) -> str:
    return f"{(host or socket.gethostname()).replace('.', '_')}-{pid}"


def test_the_next_write_of_a_target_removes_a_killed_writers_temporary_and_keeps_live_ones(tmp_path):
    dead = tmp_path / f".fit.json.{_stamp(_dead_pid())}.abcd1234.tmp.json"
    live = tmp_path / f".fit.json.{owner()}.efgh5678.tmp.json"  # this process: still writing
    elsewhere = tmp_path / f".fit.json.{_stamp(_dead_pid(), 'another.host')}.ijkl9012.tmp.json"
    other_target = tmp_path / f".report.html.{_stamp(_dead_pid())}.mnop3456.tmp.html"
    for p in (dead, live, elsewhere, other_target):
        p.write_text("half")
    write_json(tmp_path / "fit.json", {"A": 0.7})
    assert not dead.exists()
    assert live.exists() and elsewhere.exists() and other_target.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["fit.json"]


def test_a_killed_exports_staging_folder_is_removed_whole(tmp_path):
    staged = tmp_path / f".model.{_stamp(_dead_pid())}.qrst1234.export"
    (staged / "sub").mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"0" * 1024)
    running = tmp_path / f".model.{owner()}.uvwx5678.export"
    running.mkdir()
    finished = tmp_path / "model"
    finished.mkdir()
    remove_orphans(tmp_path, ".model.")
    assert not staged.exists() and running.exists() and finished.exists()


def test_a_name_that_is_not_a_stamp_is_never_removed(tmp_path):
    for name in (".model.notes", ".model.x-y.z", f".model.{socket.gethostname()}-abc.tmp"):
        (tmp_path / name).write_text("keep")
    remove_orphans(tmp_path, ".model.")
    assert len(os.listdir(tmp_path)) == 3
