"""A test-only app: a tiny ledger whose projections exercise the event store's guarantees."""
