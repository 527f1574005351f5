"""Tenancy and access: organizations, projects, members and roles, API keys, quotas."""
