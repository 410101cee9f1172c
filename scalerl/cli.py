"""The ``scalerl`` command. Each sub-command lives in ``scalerl/commands/<topic>.py`` and registers itself here.

Heavy imports (torch, matplotlib) happen inside the command bodies so that ``scalerl fit`` stays fast and
``scalerl.curves`` never pulls in torch.
"""

from __future__ import annotations

import importlib
import sys

import click
import typer

from scalerl.errors import UserError

app = typer.Typer(
    name="scalerl",
    help="Predictable RL for LLMs: the ScaleRL recipe, its ablations, and sigmoid compute-reward curves.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# topic modules under scalerl.commands; each defines register(app)
COMMAND_MODULES = ("curves", "presets", "train", "experiments")


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


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app and turns user mistakes into one line on stderr and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(UserError.exit_code)
    except click.exceptions.NoArgsIsHelpError:
        sys.exit(0)
    except click.exceptions.UsageError as exc:
        print(f"error: {' '.join(exc.format_message().split())} (see 'scalerl {exc.ctx.info_name if exc.ctx else ''} --help')".replace("scalerl scalerl", "scalerl"), file=sys.stderr)
        sys.exit(2)
    except click.exceptions.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
