"""The kernel every app stands on: errors, transactions, redaction. It imports no app
but ``events``' plain error types, and nothing of the API layer."""
