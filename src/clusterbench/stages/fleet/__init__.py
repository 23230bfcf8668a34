"""Fleet qualification (docs/methodology.md §16): its entry (`stage`), options, the per-rank phases (node-local,
the pair rounds, the retests: `qualify`, `local`, `links`), the plan of pairs (`coverage`), the judge
(`suspects`, `retests`, `racks`, `conclusion`), its records, report and actions (exclude lists, drains)."""
