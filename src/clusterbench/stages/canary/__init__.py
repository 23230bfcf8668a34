"""The numerics canary: the shipped CPU task trained on this hardware and held against the CPU curve; its entry
(`stage`) runs the train stage's work on its own task."""
