"""Errors of the catalog, each with its stable code."""

from __future__ import annotations

from neocloud.core.errors import NotFound, ValidationFailed


class OfferingInvalid(ValidationFailed):
    """An operator's definition that could never be ordered as written."""

    code = "offering_invalid"


class OfferingNotFound(NotFound):
    """No such offering in the catalog."""

    code = "offering_not_found"
