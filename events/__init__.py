"""The append-only event store: the log every state of NeoCloud is derived from.

It knows no domain: apps register their event types, projections and consumers with it.
"""
