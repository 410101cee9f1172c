"""User errors: one line naming the problem, exit code 2, no traceback, nothing half-written."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user asked for (bad path, bad column, bad config value, too few points).

    The CLI prints ``error: <message>`` on one line and exits with code 2. A bug is a traceback; a user
    mistake never is. Messages should name the problem and, where possible, how to fix it.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))  # always one line
