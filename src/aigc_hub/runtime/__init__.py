"""The consumer runtime: ordered-per-key, bounded, group-committed, retrying, dead-lettering."""
