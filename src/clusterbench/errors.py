"""Errors a user can act on, and the exit code each one ends a command with.

The CLI prints every one of them as a single line; nothing else reaches the user as a traceback.
"""

# 3 is a bug in clusterbench: an exception no boundary turned into one of the others.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad input or an environment that cannot do what was asked (exit code 2)."""

    exit_code = EXIT_USAGE


class RunFailed(Exception):
    """The run started but did not complete as it should, or a check failed (exit code 1)."""

    exit_code = EXIT_FAILED


class Interrupted(RunFailed):
    """Ctrl-C: every rank was stopped (exit code 130)."""

    exit_code = EXIT_INTERRUPTED


def one_line(exc: BaseException) -> str:
    """The first line of an error; foreign exceptions keep their type name so the cause stays visible."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(exc, (UsageError, RunFailed)):
        return first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's own OOM (torch.OutOfMemoryError, known by name so that this module needs no torch),
    or one a backend or the host allocator words in its own way."""
    text = str(exc).lower()
    return any(cls.__name__ == "OutOfMemoryError" for cls in type(exc).__mro__) or any(w in text for w in _OOM_WORDS)
