"""Slurm's compressed host lists, both ways: "gpu[01-03,07],login1" <-> gpu01 gpu02 gpu03 gpu07 login1.

What `srun` tells its tasks is read with expand(); the nodes a fleet run takes out are written with
compress(), which `--exclude=` and `scontrol ... nodename=` take as they are.
"""

from __future__ import annotations

import re

# More hosts in one range than any job has: a typo, not a cluster.
MAX_RANGE = 1 << 20

# A name that ends in digits has them as its index: gpu-03 -> ("gpu-", "03"); the digits of
# "rack2-node05" before the last run are prefix. Slurm writes brackets only at the end of a name,
# so node7.cluster stands as it is.
_INDEXED = re.compile(r"(.*?)([0-9]+)")


def expand(text: str) -> list[str]:
    """The hosts of a compressed list, in its order. A range that is not numbers, or longer than
    any job, is a ValueError."""
    hosts: list[str] = []
    for prefix, ranges, suffix, plain in re.findall(r"([^,\[]*)\[([^\]]+)\]([^,\[]*)|([^,\[\]]+)", text):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            span = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
            if not span or int(span[2] or span[1]) - int(span[1]) > MAX_RANGE:
                raise ValueError(f"cannot read the host range [{ranges}]")
            lo, hi = span[1], span[2] or span[1]
            hosts.extend(f"{prefix}{i:0{len(lo)}d}{suffix}" for i in range(int(lo), int(hi) + 1))
    return hosts


def compress(hosts: list[str]) -> str:
    """The shortest usual form of `hosts` (sorted, duplicates dropped): names that differ only in
    their last number, written with as many digits, share brackets; any other name stands as it is."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for host in sorted(set(hosts)):
        match = _INDEXED.fullmatch(host)
        if match is None or "[" in host or "]" in host or "," in host:
            plain.append(host)
            continue
        prefix, digits = match.groups()
        # "07" and "7" are different hosts: only numbers of one width share a bracket, padded to it.
        groups.setdefault((prefix, len(digits)), []).append(int(digits))
    parts = [_bracket(prefix, sorted(numbers), width) for (prefix, width), numbers in groups.items()]
    return ",".join(sorted(parts + plain))


def _bracket(prefix: str, numbers: list[int], width: int) -> str:
    def name(i: int) -> str:
        return f"{i:0{width}d}"

    if len(numbers) == 1:
        return f"{prefix}{name(numbers[0])}"
    spans: list[list[int]] = []
    for i in numbers:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    inside = ",".join(name(lo) if lo == hi else f"{name(lo)}-{name(hi)}" for lo, hi in spans)
    return f"{prefix}[{inside}]"
