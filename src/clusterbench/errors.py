"""Errors a user can act on: the CLI prints them as one line and exits 2."""


class UsageError(Exception):
    """Bad input or an environment that cannot do what was asked (exit code 2)."""


class RunFailed(Exception):
    """The run started but did not complete as it should (exit code 1)."""
