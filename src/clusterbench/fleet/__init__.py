"""Fleet qualification, as per-rank work: each node measured on its own, then the links between
nodes, round by round, and the slow ones again (docs/methodology.md §16)."""
