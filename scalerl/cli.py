"""The ``scalerl`` command. Each sub-command lives in ``scalerl/commands/<topic>.py`` and registers itself here.

Heavy imports (torch, matplotlib) happen inside the command bodies so that ``scalerl fit`` stays fast and
``scalerl.curves`` never pulls in torch.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

from typing import NoReturn

import typer

from scalerl.errors import UserError, printable

app = typer.Typer(
    name="scalerl",
    help="Predictable RL for LLMs: the ScaleRL recipe, its ablations, and sigmoid compute-reward curves.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# topic modules under scalerl.commands; each defines register(app)
COMMAND_MODULES = ("curves", "presets", "train", "experiments", "model")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"scalerl.commands.{name}")
        except ModuleNotFoundError as exc:  # a topic not built yet in this checkout
            if exc.name == f"scalerl.commands.{name}":
                continue
            raise
        module.register(app)


_register_all()


def _kind(exc: BaseException) -> str | None:
    """Which command-line outcome ``exc`` is, by class name along its MRO.

    typer bundles its own copy of click (``typer._click``) whose classes are not click's, and either may raise
    depending on the installed versions; matching names instead of classes catches both."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    for kind in ("NoArgsIsHelpError", "UsageError", "ClickException", "Abort", "Exit"):
        if kind in names:
            return kind
    return None


def _usage_line(exc: BaseException) -> str:
    ctx = getattr(exc, "ctx", None)
    command = " ".join(["scalerl", *([] if ctx is None or ctx.parent is None else [ctx.info_name])])
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return f"error: {message.rstrip('.')} (see '{command} --help')"


def fail(message: str, code: int = UserError.exit_code) -> NoReturn:
    """The one place a user mistake ends the program: one line on stderr, then ``code`` (2 by default)."""
    print(printable(" ".join(str(message).split())), file=sys.stderr)
    sys.exit(code)


def empty_argument(argv: list[str]) -> str | None:
    """The first empty value on the command line (``--out ""``, ``--out=``, ``fit ""``), named for the error
    message, or None. No option or argument takes an empty value: a path would become the current directory
    (``Path("")`` is ``.``), and a run would be written there."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if not arg.strip():
            return f"argument {i + 1}" + (f" (after {argv[i - 1]})" if i else "")
        if arg.startswith("--") and "=" in arg and not arg.split("=", 1)[1].strip():
            return f"the value of {arg.split('=', 1)[0]}"
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app and turns user mistakes into one line on stderr and exit code 2."""
    given = sys.argv[1:] if argv is None else [str(a) for a in argv]
    empty = empty_argument(given)
    if empty is not None:
        fail(f"error: {empty} is empty; give a value (see 'scalerl --help')")
    if not given:  # bare `scalerl`: the help, then exit 2 (click before 8.2 exits 0 after its no-args help)
        with contextlib.suppress(Exception, SystemExit):
            app(args=["--help"], standalone_mode=False, prog_name="scalerl")
        fail("error: no command given (see 'scalerl --help')")
    try:
        result = app(args=argv, standalone_mode=False, prog_name="scalerl")
    except UserError as exc:
        fail(f"error: {exc}", exc.exit_code)
    except KeyboardInterrupt:
        fail("error: interrupted", 130)
    except UnicodeDecodeError as exc:  # a file read as text is not UTF-8; the reader should have named it
        fail(f"error: a file is not UTF-8 text ({exc.reason} at byte {exc.start}); convert it to UTF-8")
    except Exception as exc:
        kind = _kind(exc)
        if kind == "NoArgsIsHelpError":  # bare `scalerl` (typer has printed the help already where it does)
            fail("error: no command given (see 'scalerl --help')")
        if kind == "UsageError":
            fail(_usage_line(exc))
        if kind == "ClickException":
            fail(f"error: {exc.format_message()}", int(getattr(exc, "exit_code", 1) or 1))  # type: ignore[attr-defined]
        if kind == "Abort":
            fail("error: aborted", 130)
        if kind == "Exit":
            sys.exit(int(getattr(exc, "exit_code", 0) or 0))
        raise
    if isinstance(result, int) and result:  # standalone_mode=False returns a command's exit code
        sys.exit(result)


if __name__ == "__main__":
    main()
