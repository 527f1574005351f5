"""API conventions shared by every endpoint: errors, and (with tenancy) auth and pagination."""
