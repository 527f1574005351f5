"""Errors of ordering, each with its stable code. An order refused for any of these is not
written at all: the request can be corrected and sent again."""

from __future__ import annotations

from neocloud.core.errors import Conflict, ValidationFailed


class OfferingUnavailable(ValidationFailed):
    """No such offering, or it is retired."""

    code = "offering_unavailable"


class RegionNotOffered(ValidationFailed):
    """The offering is not sold in that region (or the order names none)."""

    code = "region_not_offered"


class PricePlanNotOffered(ValidationFailed):
    """The offering has no such price plan."""

    code = "price_plan_not_offered"


class GpuModelNotOffered(ValidationFailed):
    """The offering does not include that GPU model."""

    code = "gpu_model_not_offered"


class ShapeNotAllowed(ValidationFailed):
    """Quantity, runtime or window outside what the offering allows."""

    code = "shape_not_allowed"


class QuotaExceeded(ValidationFailed):
    """The order asks more than the organization's quota allows."""

    code = "quota_exceeded"


class InvalidTransition(Conflict):
    """The order's status does not allow this step; nothing changed."""

    code = "invalid_transition"
    retryable = False
