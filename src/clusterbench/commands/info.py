"""`clusterbench info`: the hardware picture, printed and kept in a run folder."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from clusterbench import argtypes
from clusterbench.hw.render import render
from clusterbench.results import codec
from clusterbench.results.folder import RunFolder
from clusterbench.runtime.command import LocalCommand


@dataclass(frozen=True)
class InfoOptions:
    json: bool = False  # stdout is the picture as JSON, for pipes
    pcie_load: bool = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the picture as JSON instead of text")
    p.add_argument("--pcie-load", action="store_true",
                   help="re-read PCIe links while the GPUs copy data (idle GPUs park their links)")


def work(folder: RunFolder, opts: InfoOptions) -> None:
    from clusterbench.hw.topology import describe  # torch (the PCIe load, its version): only when asked

    info = describe(pcie_load=opts.pcie_load)
    folder.record(hardware=info)
    print(json.dumps(codec.dump(info), indent=1) if opts.json else render(info), flush=True)


COMMAND = LocalCommand(
    "info", "the hardware picture: CPU, memory, GPUs, links, topology, NICs",
    add_arguments, lambda args: InfoOptions(**argtypes.given(args, InfoOptions)), work,
    results_to_stderr=lambda opts: opts.json,
)
