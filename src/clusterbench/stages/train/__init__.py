"""The fine-tuning benchmark and its loss alignment (docs/methodology.md §4, §5): its entry (`stage`), options,
the job and its per-rank loop, models, data and assets, records, metrics, references, alignment, stragglers
and report."""
