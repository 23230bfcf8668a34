"""How local ranks start (launch._context, forking.py): forked from the command's own process while a
fork of it is clean, from a forkserver once it is not. A fork copies only the forking thread, so a
rank forked beside a live pool of threads can hang on its first use of it (a one-rank train did,
when the command had tokenized its data before starting the ranks)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import threading
    from clusterbench import launch
    from clusterbench.dist import DistConfig
    from clusterbench.train.data import load_task
    from clusterbench.forking import without_thread_pools

    def start(device):
        return launch._context(launch.Job(print, None, DistConfig("gloo", device, 60))).get_start_method()

    seen = [start("cpu"), start("cuda")]
    with without_thread_pools():
        load_task(seq_len=32, seed=0)  # what `train` does before its ranks start
    seen.append(start("cpu"))
    stop = threading.Event()
    threading.Thread(target=stop.wait).start()
    seen.append(start("cpu"))
    stop.set()
    print(*seen)
""")


def test_ranks_fork_from_a_clean_command_and_from_a_forkserver_otherwise() -> None:
    found = subprocess.run([sys.executable, "-c", SCRIPT], check=False, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    # A CUDA job never forks a process that may have asked CUDA anything; a thread started since torch's
    # import (here a plain one, in life OpenMP's or the tokenizer's pool) sends the ranks to the forkserver.
    assert found.stdout.split() == ["fork", "forkserver", "fork", "forkserver"]
