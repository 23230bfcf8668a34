"""The burn-in as per-rank work: every device under sustained load for a duration, window by window
(docs/burnin.md); what it found is judged after the ranks (analyse/burnin.py)."""
