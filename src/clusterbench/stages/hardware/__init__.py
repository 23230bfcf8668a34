"""The hardware picture as a stage (docs/methodology.md §2, §12): its entry (`stage`), records, metrics and report;
its probes are hw/'s."""
