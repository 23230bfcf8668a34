"""How local ranks start (launch._context, runtime/forking.py): forked from the command's own process while a
fork of it is clean, from a forkserver once it is not. A fork copies only the forking thread, so a
rank forked beside a live pool of threads can hang on its first use of it (a one-rank train did,
when the command had tokenized its data before starting the ranks)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import threading
    from clusterbench.runtime import launch
    from clusterbench.runtime.dist import DistConfig
    from clusterbench.stages.train.data import load_task
    from clusterbench.runtime.forking import without_thread_pools

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


FORKSERVER_RUN = textwrap.dedent("""
    import threading
    import torch
    import torch.distributed as dist
    from clusterbench.runtime import launch
    from clusterbench.runtime.dist import resolve

    def job(worker, payload, progress):
        data = torch.ones(4)
        dist.all_reduce(data)
        assert data[0].item() == worker.world_size

    if __name__ == "__main__":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        found = launch.Job(job, None, resolve("gloo", "cpu", 60))
        print(launch._context(found).get_start_method(), launch.run(found, 2).code)
""")


def test_ranks_from_the_forkserver_meet_and_reduce(tmp_path: Path) -> None:
    """The forkserver path is what every CUDA build takes, and no CI machine has one: here a thread forces it."""
    script = tmp_path / "forkserver_run.py"
    script.write_text(FORKSERVER_RUN)
    found = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.split() == ["forkserver", "0"]
