"""The AI video generation pipeline (seed 004): tasks, scheduler, providers, ledger."""
