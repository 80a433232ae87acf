"""The business pipelines built on the backbone: generation, avcc, documents, vistack."""
