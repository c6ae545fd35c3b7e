"""The one error a user can cause, and the exit status it maps to."""

from __future__ import annotations

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user. The CLI prints its message on one line and exits with :data:`EXIT_USAGE`.

    Numerics word the message in their own terms (``L must be >= 1``); the CLI layer names the flag.
    The message should name the fix (``pass --template plain``), not the symptom.
    """


__all__ = ["EXIT_USAGE", "UsageError"]
