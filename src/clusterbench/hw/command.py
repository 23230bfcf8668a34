"""`clusterbench info`: the hardware picture printed and kept in a run folder.

record_hardware() is how every other command stores the same picture in its run.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clusterbench.hw.topology import describe, render
from clusterbench.results import RunFolder, default_run_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the picture as JSON instead of text")
    p.add_argument("--pcie-load", action="store_true",
                   help="re-read PCIe links while the GPUs copy data (idle GPUs park their links)")
    p.add_argument("--out", default=None, help="run folder (default runs/<UTC time>-info)")


def record_hardware(folder: RunFolder, pcie_load: bool = False) -> dict[str, Any]:
    """Store describe() under run.json "hardware" and return it.

    Cheap by default (NVML and /sys reads, no CUDA context), so a parent process can call
    it before it spawns CUDA workers; pcie_load=True is the slow, CUDA-starting reading.
    """
    info = describe(pcie_load=pcie_load)
    folder.set("hardware", info)
    return info


def main(args: argparse.Namespace) -> int:
    folder = RunFolder(Path(args.out) if args.out else default_run_dir("info"), "info", list(sys.argv))
    info = record_hardware(folder, pcie_load=args.pcie_load)
    folder.finish("complete")
    if args.json:
        print(json.dumps(info, indent=1))
        # stdout stays pure JSON for pipes; the folder is named on stderr.
        print(f"# results: {folder.json_path}", file=sys.stderr)
    else:
        print(render(info))
        print(f"# results: {folder.json_path}")
    return 0
