"""``scalerl export`` and ``scalerl eval`` on bad input (issue 33), as tests/test_bad_input.py checks the other
commands: one line on stderr starting ``error:``, exit code 2, no traceback, nothing created, changed or removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_bad_input import _run_dir, assert_refused, ws  # noqa: F401  (ws: the shared workspace fixture)

from scalerl.cli import main


@pytest.fixture
def wsx(ws: Path) -> Path:  # noqa: F811
    """The shared workspace plus runs and folders that export and eval refuse."""
    _run_dir(ws / "nockpt", None, latest=None)  # a run that never wrote a checkpoint
    _run_dir(ws / "fakeckpt", b"not a checkpoint")  # a checkpoint at step 2 that is no checkpoint
    (ws / "modelfolder").mkdir()
    (ws / "modelfolder" / "config.json").write_text("{}\n")
    (ws / "badexport").mkdir()
    (ws / "badexport" / "config.json").write_text("{}\n")
    (ws / "badexport" / "scalerl_export.json").write_text("{not json\n")
    (ws / "halfexport").mkdir()
    (ws / "halfexport" / "config.json").write_text("{}\n")
    (ws / "halfexport" / "scalerl_export.json").write_text('{"step": 3}\n')
    (ws / "listexport").mkdir()
    (ws / "listexport" / "config.json").write_text("{}\n")
    (ws / "listexport" / "scalerl_export.json").write_text("[1, 2]\n")
    return ws


EXPORT = ["export", "fakeckpt", "--out", "exp"]
EVAL = ["eval", "fakeckpt"]

CASES: dict[str, list[str]] = {
    # --- export: what to export
    "export-no-run": ["export", "--out", "exp"],
    "export-no-out": ["export", "fakeckpt"],
    "export-missing-dir": ["export", "nothing", "--out", "exp"],
    "export-a-file": ["export", "afile", "--out", "exp"],
    "export-not-a-run": ["export", "emptydir", "--out", "exp"],
    "export-model-folder": ["export", "modelfolder", "--out", "exp"],
    "export-no-checkpoints": ["export", "nockpt", "--out", "exp"],
    "export-dangling-latest": ["export", "dangling", "--out", "exp"],
    "export-step-missing": [*EXPORT, "--step", "7"],
    "export-step-word": [*EXPORT, "--step", "abc"],
    "export-truncated-checkpoint": ["export", "truncckpt", "--out", "exp"],
    "export-empty-checkpoint": ["export", "emptyckpt", "--out", "exp"],
    "export-not-a-checkpoint": EXPORT,
    "export-config-not-utf8": ["export", "badcfg", "--out", "exp"],
    # --- export: where it writes
    "export-out-not-empty": ["export", "fakeckpt", "--out", "data"],
    "export-out-is-file": ["export", "fakeckpt", "--out", "afile"],
    "export-out-under-file": ["export", "fakeckpt", "--out", "afile/exp"],
    "export-out-unwritable": ["export", "fakeckpt", "--out", "/proc/scalerl-export"],
    # --- eval: what to evaluate
    "eval-no-source": ["eval"],
    "eval-missing-dir": ["eval", "nothing"],
    "eval-a-file": ["eval", "afile"],
    "eval-not-a-model": ["eval", "emptydir"],
    "eval-no-checkpoints": ["eval", "nockpt"],
    "eval-dangling-latest": ["eval", "dangling"],
    "eval-step-missing": [*EVAL, "--step", "7"],
    "eval-steps-one-missing": [*EVAL, "--step", "2,7"],
    "eval-step-word": [*EVAL, "--step", "2,x"],
    "eval-step-and-all": [*EVAL, "--step", "2", "--all"],
    "eval-truncated-checkpoint": ["eval", "truncckpt"],
    "eval-not-a-checkpoint": EVAL,
    "eval-all-not-a-checkpoint": [*EVAL, "--all"],
    "eval-broken-export-description": ["eval", "badexport"],
    "eval-half-export-description": ["eval", "halfexport"],
    "eval-export-description-a-list": ["eval", "listexport"],
    "eval-config-not-utf8": ["eval", "badcfg"],
    # --- eval: settings and output
    "eval-n-samples-zero": [*EVAL, "--n-samples", "0"],
    "eval-n-samples-word": [*EVAL, "--n-samples", "many"],
    "eval-task-unknown": [*EVAL, "--task", "bogus"],
    "eval-json-is-dir": [*EVAL, "--json", "emptydir"],
    "eval-json-under-file": [*EVAL, "--json", "afile/e.json"],
    "eval-json-unwritable": [*EVAL, "--json", "/proc/scalerl-eval.json"],
}


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_line_and_exit_2(argv, wsx, capsys, monkeypatch):
    assert_refused(argv, wsx, capsys, monkeypatch)


def test_the_messages_name_the_problem(wsx, capsys, monkeypatch):
    monkeypatch.chdir(wsx)
    expected = {
        "export-no-checkpoints": "has no checkpoints",
        "export-step-missing": "has no step 7; it holds checkpoints at steps 2",
        "export-out-not-empty": "--out data is not empty",
        "export-model-folder": "is a model folder, not a run directory",
        "eval-not-a-model": "neither a run directory (no config.yaml) nor a model folder (no config.json)",
        "eval-not-a-checkpoint": "is truncated, empty or not a scalerl checkpoint",
        "eval-step-and-all": "--step and --all",
    }
    for case, needle in expected.items():
        with pytest.raises(SystemExit):
            main(CASES[case])
        assert needle in capsys.readouterr().err, case


def test_a_step_asked_for_twice_is_evaluated_once(tmp_path):
    from scalerl.config import RunConfig
    from scalerl.runs import Source, run_steps

    source = Source(path=tmp_path, cfg=RunConfig(), kind="run", steps=(2, 4))
    assert run_steps(source, "2,2") == [2]
    assert run_steps(source, "4,2,4") == [4, 2]
