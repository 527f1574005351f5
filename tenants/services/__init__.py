"""Tenancy writes, one module per subject. Each service checks the actor's rights, validates
against the current projections, and appends to the organization's stream with the version
it read, so a concurrent change makes the append fail (``StreamConflict``) instead of
breaking a rule.

Entry points run services through ``neocloud.core.transactions.atomic_with_retry``; services
re-read (and lock) the organization row, so a retry decides on fresh state. Lock order: the
organization's row, then the log's append lock (``stream``).

The services are importable from here (``from tenants import services``).
"""

from tenants.services.bootstrap import operator_bootstrap, organization_bootstrap
from tenants.services.invitations import invitation_accept, invitation_create, invitation_revoke
from tenants.services.keys import api_key_create, api_key_mark_used, api_key_revoke
from tenants.services.members import member_change_role, member_remove, member_set_projects
from tenants.services.organizations import (
    organization_create,
    organization_create_with_owner,
    organization_reactivate,
    organization_suspend,
    organization_update,
)
from tenants.services.projects import project_create, project_update
from tenants.services.quotas import quota_clear, quota_set
from tenants.services.secrets import secret_create, secret_delete, secret_update, secrets_reseal
from tenants.services.ssh_keys import ssh_key_add, ssh_key_remove
from tenants.services.users import (
    email_verification_token,
    user_email_verify,
    user_get_or_register,
    user_register,
    user_update,
)

__all__ = [
    "api_key_create",
    "api_key_mark_used",
    "api_key_revoke",
    "email_verification_token",
    "invitation_accept",
    "invitation_create",
    "invitation_revoke",
    "member_change_role",
    "member_remove",
    "member_set_projects",
    "operator_bootstrap",
    "organization_bootstrap",
    "organization_create",
    "organization_create_with_owner",
    "organization_reactivate",
    "organization_suspend",
    "organization_update",
    "project_create",
    "project_update",
    "quota_clear",
    "quota_set",
    "secret_create",
    "secret_delete",
    "secret_update",
    "secrets_reseal",
    "ssh_key_add",
    "ssh_key_remove",
    "user_email_verify",
    "user_get_or_register",
    "user_register",
    "user_update",
]
