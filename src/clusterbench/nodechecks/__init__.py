"""What a node is checked for, in one table that `check`, `fleet` and `burnin` all walk (docs/methodology.md,
"Node checks"): each check's entry (`table`), the functions that measure it on a device or a node
(`measures`), the numerics vote's task (`numerics`), what a healthy node of a class measures (`bands`), the
rules that judge a node's counters (`node_rules`), and `check`'s run of the table on one node (`health`)."""
