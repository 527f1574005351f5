"""The kernel every app stands on: errors, transactions, redaction. It imports no app
(``events`` included) and nothing of the API layer: plain Python and Django only."""
