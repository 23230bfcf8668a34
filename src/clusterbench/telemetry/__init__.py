"""Device telemetry while the stages run: a sampler thread per rank (NVML on GPUs, /proc and /sys
on CPUs), stage windows, and rank 0's record of both (docs/methodology.md §10)."""
