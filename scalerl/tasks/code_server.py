"""The solution's side of a code grading (App. A.3), run as main.py in the solution's sandbox: imports
``solution.py``, tells the checker its names, then answers calls. Everything it sends is plain data
(``_wire.encode``); it holds no test, no token and no verdict. argv: the read and write ends of its channel."""

import os
import sys
import types

import _wire

inbox = os.fdopen(int(sys.argv[1]), "r", encoding="utf-8")
outbox = os.fdopen(int(sys.argv[2]), "w", encoding="utf-8")


def send(message: tuple) -> None:
    outbox.write(_wire.encode(message) + "\n")
    outbox.flush()


def failure(exc: BaseException) -> tuple:
    return ("raise", type(exc).__name__, str(exc)[:2000])


try:
    import solution
except BaseException as exc:  # noqa: BLE001 - a broken solution: the checker fails with this reason
    send(failure(exc))
    raise
names = {}
for name, value in vars(solution).items():
    if name.startswith("__") and name.endswith("__"):
        continue
    if isinstance(value, types.ModuleType):
        names[name] = ("module", value.__name__)
    elif callable(value):
        names[name] = ("callable",)
    else:
        try:
            names[name] = ("value", _wire.decode(_wire.encode(value)))
        except (TypeError, ValueError):
            pass  # not plain data: the tests cannot use it
send(("names", names))
for line in inbox:
    name, args, kwargs = _wire.decode(line)
    try:
        reply = ("ok", getattr(solution, name)(*args, **kwargs))
        text = _wire.encode(reply)
    except BaseException as exc:  # noqa: BLE001 - any failure goes back to the checker as an exception
        text = _wire.encode(failure(exc))
    outbox.write(text + "\n")
    outbox.flush()
os._exit(0)  # the checker is done: stop now, whatever threads the solution left running
