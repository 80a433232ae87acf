"""Vector stores: where chunk embeddings live and are searched (seed 003 §4.3)."""
