"""The customer web console: server-rendered pages over the same services and selectors as the
API (no business rule here), htmx for live parts."""
