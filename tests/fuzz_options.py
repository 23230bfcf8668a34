"""What tests/test_fuzz.py feeds the CLI as option values and launcher environments, and which of
them every command must refuse (exit 2): a number out of its range or not finite, a size that is
none, an empty list item, a port outside 1..65535, a seat outside the world, an address that does
not resolve.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hypothesis import strategies as st

# -- strategies: option values --------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]?)(?:I?B)?", re.ASCII | re.IGNORECASE)
_SCALE = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
NOT_FINITE_WORDS = ("nan", "-nan", "inf", "+inf", "-inf", "infinity", "-infinity", "1e999", "-1e999")

NUMBER_TEXTS = ["0", "-0", "-1", "1", "0.5", "2", "8", "nan", "NaN", "inf", "-inf", "1e999", "-1e999", "1e-300",
                "1e300", "99999999999999999999999", "1" * 400, "", " ", "x", "1,5", "0x10", "1.5.2", "+5", "1e3"]
SIZE_TEXTS = ["0", "-8", "1", "8", "1K", "1M", "1G", "16G", "1Q", "", "1.5K", "0.1", "nan", "inf", "1e3",
              "99999999999999999999G", "1" * 400, "1" * 400 + "G", "K", "..", "1K..2K"]


def numbers() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(NUMBER_TEXTS), st.integers(-10**6, 10**6).map(str), st.floats().map(repr),
                     st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6))


def sizes() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(SIZE_TEXTS), st.integers(-10**12, 10**12).map(str))


def size_ranges() -> st.SearchStrategy[str]:
    return st.one_of(st.tuples(sizes(), sizes()).map("..".join), sizes(),
                     st.sampled_from(["1K...2K", "1K..2K..4K", "..1K", "1K..", "1K..1K", " 1K .. 2K "]))


def words(known: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Comma-separated lists of known names, with the slips a hand makes: empty items, case, spaces, strangers."""
    item = st.sampled_from([*known, "", " ", "bogus", known[-1].upper(), f" {known[0]}"])
    return st.lists(item, min_size=1, max_size=4).map(",".join)


def bad_words(text: str, known: tuple[str, ...]) -> bool:
    """Certainly no list of `known` names: an empty item or a name nobody knows."""
    return any(item not in known and item.strip().lower() not in known for item in text.split(","))


def bad_number(text: str, low: float, inclusive: bool, whole: bool = False) -> bool:
    """Certainly no value of an option that takes numbers from `low` (whole ones, for a count)."""
    t = text.strip()
    if t.lower() in NOT_FINITE_WORDS or not t or re.fullmatch(r"[A-Za-z]+|[+-]?\d+\.\d+\.\d+", t):
        return True
    if not _NUMBER.fullmatch(t):
        return False  # 0x10, 1_000, 1,5: a reader may take it or not
    value = float(t)
    if not math.isfinite(value):
        return not whole  # 400 digits: too large for a real; a count that large is the range check's business
    return (whole and not value.is_integer()) or value < low or (value == low and not inclusive)


def bad_port(text: str) -> bool:
    t = text.strip()
    return bad_number(t, 1, True, whole=True) or (bool(_NUMBER.fullmatch(t)) and float(t) > 65535)


def _size(text: str) -> float | None:
    """The bytes a size names, or None when it names none for certain (negative, empty, an unknown unit)."""
    t = text.strip()
    match = _SIZE.fullmatch(t)
    if match:
        return float(match.group(1)) * _SCALE[match.group(2).upper()]
    if not _NUMBER.fullmatch(t):
        return None
    value = float(t)
    return value if value < 1 or value == math.inf else math.nan  # 1e3: a reader may take it or not


def bad_size(text: str) -> bool:
    value = _size(text)
    return value is None or value < 1 or value == math.inf


def bad_size_range(text: str) -> bool:
    """Certainly no LOW..HIGH: a bad size at either end, high below low, or more or fewer than two ends
    (one good size alone a reader may take as a range of one)."""
    parts = text.split("..")
    if len(parts) == 1:
        return bad_size(text)
    if len(parts) != 2 or "..." in text or bad_size(parts[0]) or bad_size(parts[1]):
        return True
    return _size(parts[0]) > _size(parts[1])  # False when either is nan (1e3: not known to be a size)


def outputs() -> st.SearchStrategy[str]:
    """Where a writer is told to write: its own input, the user's files and folders, nowhere, or a new file."""
    return st.sampled_from(["{run}/run.json", "{other}/run.json", "{baseline}", "{reference}", "{rules}", "{run}",
                            "{out}", "{run}/nccl/nccl.node0.1.log", "{out}/link", "{out}/pipe", "/proc/clusterbench/x",
                            "", "{out}/new.json", "{out}/new.svg"])


def bad_output(text: str) -> bool:
    return not text.startswith("{out}/new")


# -- strategies: launcher environments ----------------------------------------------------------------

FREE_PORT = "{free port}"  # replaced, when the case runs, by a port nothing listens on
INTS = ["0", "1", "2", "5", "-1", "x", "1.5", "99999999999999999999"]
ADDRS = ["127.0.0.1", "localhost", "nosuch.invalid", "256.256.256.256", "-", "a b"]
RESOLVES = ("127.0.0.1", "localhost")
PORTS = [FREE_PORT, "0", "65536", "99999", "-1", "abc", "1.5", ""]
NODELISTS = ["localhost", "nosuch[01-02]", "gpu[a-b]", "gpu[1-99999999999]", "gpu[5-1]", "[", "gpu[01-02", ",,", ""]


@dataclass(frozen=True)
class Launch:
    """The variables a launcher would set, and none of the others."""

    launcher: str  # torchrun, environment, ompi, slurm
    variables: tuple[tuple[str, str], ...]

    @property
    def env(self) -> dict[str, str]:
        return dict(self.variables)


_NAMES = {
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK"), "environment": ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    "ompi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
}


_GOOD = {  # a job of one rank that works on this host: what the damage starts from
    "torchrun": {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": FREE_PORT, "TORCHELASTIC_RUN_ID": "fuzz"},
    "environment": {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": FREE_PORT},
    "ompi": {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_MCA_ess_base_jobid": "1234"},
    "slurm": {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0",
              "SLURM_JOB_ID": "1234", "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1"},
}
_POOLS = {"MASTER_ADDR": ADDRS, "MASTER_PORT": PORTS, "SLURM_STEP_NODELIST": NODELISTS,
          "SLURM_JOB_ID": ["abc", ""], "SLURM_JOB_NUM_NODES": ["4", "x"], "OMPI_MCA_ess_base_jobid": ["x", ""],
          "TORCHELASTIC_RUN_ID": [""]}


@st.composite
def launches(draw: st.DrawFn) -> Launch:
    """A good launch with one to three variables changed, added or removed."""
    launcher = draw(st.sampled_from(sorted(_GOOD)))
    env = dict(_GOOD[launcher])
    names = sorted({*env, *_NAMES[launcher], "MASTER_ADDR", "MASTER_PORT"})
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
        value = draw(st.none() | st.sampled_from(_POOLS.get(name, INTS)))
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return Launch(launcher, tuple(sorted(env.items())))


def launch_outcome(launch: Launch) -> str:
    """refuse: it can never work, so it is refused before any rendezvous; run: one rank that works;
    wait: a good job of several ranks (its peers never come, so it is not run); else unknown."""
    env = launch.env
    rank_name, size_name, local_name = _NAMES[launch.launcher]
    if rank_name not in env or size_name not in env:
        return "unknown"  # no launcher: run by hand, or half a launcher's variables
    if launch.launcher == "slurm" and (env[size_name] == "1" or not re.fullmatch(r"\d+", env.get("SLURM_STEP_ID", ""))):
        return "unknown"  # a batch script or `srun --pty bash`: not a launcher, the user runs by hand

    def whole(name: str) -> int | None:
        text = env.get(name)
        return int(text) if text is not None and re.fullmatch(r"\d+", text) else None
    rank, size = whole(rank_name), whole(size_name)
    if rank is None or size is None or size < 1 or rank >= size:
        return "refuse"
    local = whole(local_name)
    if local_name in env and (local is None or local >= size):
        return "refuse"
    port = env.get("MASTER_PORT", "")
    if port and port != FREE_PORT and not (re.fullmatch(r"\d+", port) and 1 <= int(port) <= 65535):
        return "refuse"
    addr = env.get("MASTER_ADDR") or _launcher_addr(launch)
    if addr not in RESOLVES or not (port or _launcher_port(launch)):
        return "refuse"
    return "wait" if size > 1 else "run"


def _launcher_addr(launch: Launch) -> str | None:
    env = launch.env
    if launch.launcher == "ompi":
        size = env.get("OMPI_COMM_WORLD_SIZE")
        return "127.0.0.1" if size and size == env.get("OMPI_COMM_WORLD_LOCAL_SIZE") else None
    if launch.launcher == "slurm":
        return env.get("SLURM_STEP_NODELIST")  # localhost, or a list whose first host resolves nowhere
    return None


def _launcher_port(launch: Launch) -> bool:
    env = launch.env
    if launch.launcher == "ompi":
        return bool(env.get("OMPI_MCA_ess_base_jobid"))
    if launch.launcher == "slurm":
        return bool(env.get("SLURM_JOB_ID"))
    return False
