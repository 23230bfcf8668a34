"""The burn-in (docs/burnin.md): its entry (`stage`), options and plan (`plan`), per-rank soak (`soak`, `matmul`,
`memory`, `collective`, `determinism`, rank 0's `recorder` and `series`), records, drift and metrics, report."""
