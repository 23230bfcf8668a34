"""The boundary: everything clusterbench reads from outside passes one checker per kind of input.

`files` decides which paths are read at all (regular files only, within a size, streamed where
they can be large), `documents` what a JSON or YAML text may hold (bounded depth, finite numbers,
no aliases), `patterns` how a user's regular expression is matched (with a bound on its cost).
Each refuses in one line naming the input (a UsageError); nothing behind it re-checks.
"""
