"""Hangs: which rank, which collective, from PyTorch's Flight Recorder dumps (docs/methodology.md,
"Hangs: which rank, which collective").

PyTorch's Flight Recorder keeps the last N collectives of every rank (TORCH_FR_BUFFER_SIZE) and
writes them out, one file per rank, when a collective times out. The package reads those files
(`unpickle` admits plain data only, a dump being untrusted input; `dumps` names each file's rank and
host), finds the collective each process group is stuck in and the rank that never entered it
(`analysis`), says so in lines to print (`diagnosis`), and lets clusterbench's own ranks record and
write such dumps (`record`). Reading needs no torch; only `record` loads it, inside its functions.
"""

from clusterbench.flight.diagnosis import culprit, diagnose, is_dump_folder

__all__ = ["culprit", "diagnose", "is_dump_folder"]
