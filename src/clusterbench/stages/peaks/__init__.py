"""Peak matmul and copy figures (docs/methodology.md §12): the entry (`stage`, also `clusterbench peak`'s options),
records, metrics and report; the measuring is hw/peaks.py's."""
