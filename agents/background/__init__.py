"""Background work: the concurrent worker and the scheduled prune."""
