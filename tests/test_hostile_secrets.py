"""A password typed on the command line is never printed, whichever command it is given to and however it is
refused: by the option's own check, by argparse (an option the command does not take, a positional it does
not expect, `--option=URL`), by a reader that takes it for a path, or from the environment.

Driven by the parsers (fuzz_parsers.py): every command meets every option that takes a URL anywhere in the
CLI, and a URL where it expects a positional, each time with a password typed the way users type them
(unescaped /, a space, no scheme, a password= parameter). Every URL here is refused before anything runs
(a port past 65535, credentials holding a /), so the table costs a second or two.
"""

from __future__ import annotations

import os
from pathlib import Path

import fuzz_parsers
from conftest import run_side_by_side

SECRET = "Hunter2NotShown"
URLS = {
    "postgresql": f"postgresql://alice:{SECRET}@db.invalid:99999/cb",
    "a / in the user": f"https://u/x:{SECRET}@gw:9091",
    "a space in the password": f"postgresql://alice:pa ss{SECRET}@db.invalid:99999/cb",
    "no scheme": f"bob:{SECRET}@gw:99999",
    "password parameter": f"postgresql://alice@db.invalid:99999/cb?password={SECRET}",
    "an @ and a space": f"https://bob:p@ ss{SECRET}@gw:99999",
}


def _cases() -> dict[str, tuple[list[str], dict[str, str]]]:
    flags = sorted({o.flag for o in fuzz_parsers.options(of="url")})
    assert {"--store", "--pushgateway"} <= set(flags)
    urls = list(URLS.items())
    cases, n = {}, 0
    for words, parser in fuzz_parsers.commands():
        base = [*words, *fuzz_parsers.required(parser)]
        for slot in [*flags, "=", "positional"]:
            what, url = urls[n % len(urls)]
            n += 1
            argv = {"=": [*base, f"{flags[n % len(flags)]}={url}"], "positional": [*words, url]}.get(slot,
                                                                                                     [*base, slot, url])
            cases[f"{' '.join(words)} {slot}: {what}"] = (argv, {})
        if any(a.dest == "store" for a in parser._actions):
            what, url = urls[n % len(urls)]
            n += 1
            cases[f"{' '.join(words)} $CLUSTERBENCH_STORE: {what}"] = (base, {"CLUSTERBENCH_STORE": url})
    return cases


def test_no_password_is_printed_by_any_command_however_it_is_refused(tmp_path: Path) -> None:
    cases = _cases()
    done = run_side_by_side({name: argv for name, (argv, _) in cases.items()}, cwd=tmp_path, timeout=60,
                            envs={name: {**os.environ, **env} for name, (_, env) in cases.items()})
    failures = []
    for name, proc in done.items():
        if proc is None:
            failures.append(f"{name}: ran past 60 s")
            continue
        said = proc.stdout + proc.stderr
        if SECRET in said or "Traceback" in said or proc.returncode not in (1, 2):
            failures.append(f"{name}: exit {proc.returncode}: {said.strip()[-300:]}")
        elif len(proc.stderr.strip().splitlines()) != 1:
            failures.append(f"{name}: stderr was not one line: {proc.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)
    assert not list(tmp_path.iterdir()), "a refused command wrote something"
