"""The collective benchmark (docs/methodology.md §1, §8, §13, §14): its entry (`stage`), options and plan, the
per-rank sweep and the pairwise rounds, its records, metrics, the alpha-beta cost model and its predictions,
and its report sections."""
