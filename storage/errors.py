"""Errors of volumes, each with its stable code."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, Conflict, ValidationFailed


class VolumeInUse(Conflict):
    """A volume that a run not yet finished mounts is not deleted."""

    code = "volume_in_use"
    retryable = False


class StorageQuotaExceeded(ApplicationError):
    """The organization's volumes would provision more than its storage quota
    (``VOLUME_GB_PER_ORGANIZATION``)."""

    code = "storage_quota_exceeded"
    http_status = 409


class NodeDiskFull(ValidationFailed):
    """No node of the cluster has the disk room a new local volume asks (``size_gb``)."""

    code = "node_disk_full"


class VolumeFull(Conflict):
    """A shared volume holds more than its size (where the filesystem has no quota to stop
    it, usage is measured): new work that mounts it is refused until some is freed."""

    code = "volume_full"
    retryable = False
