"""API conventions shared by every endpoint: errors, strict fields and JSON parsing,
pagination, idempotency, the schema.

This layer sits below the apps and knows no tenant; the tenant-aware pieces (the actor of a
request, ``TenantViewSet``, ``IsOperator``, the throttles per key, the admin's
``ServiceAdmin``) are in ``tenants``, which every app already stands on."""
