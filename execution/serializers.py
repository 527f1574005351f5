"""Execution's request and response shapes (PROTOCOL §2-§5). Request fields are strict and
bounded (``neocloud.api.fields``); query parameters are strings, parsed here."""

from __future__ import annotations

import base64
import binascii
from typing import Any, ClassVar

from rest_framework import serializers

from execution.models import AssignmentState
from neocloud.api.bodies import QuerySerializer
from neocloud.api.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictDateTimeField,
    StrictIntegerField,
    StrictType,
    StrictUUIDField,
)

MAX_REPORTS = 100
MAX_CHUNK_BYTES = 64 * 1024
MAX_CHUNKS_BYTES = 1024 * 1024  # of one request
MAX_CHUNKS = 1024
MAX_OFFSET = 1 << 62
MAX_PID = (1 << 31) - 1
REPORT_KINDS = ("started", "start_failed", "exited", "ports")
ENDPOINT_KINDS = ("port", "ssh")  # "ssh": the run's sshd (issue 32)


# --- the agent's side ------------------------------------------------------------------------


class AssignmentsQuerySerializer(serializers.Serializer):  # type: ignore[type-arg]
    wait = serializers.FloatField(
        min_value=0, max_value=60, default=0, help_text="Seconds to wait for a change."
    )
    since = serializers.CharField(
        max_length=64, required=False, help_text="The version the agent has."
    )


class GpuRefSerializer(serializers.Serializer):  # type: ignore[type-arg]
    index = serializers.IntegerField()
    uuid = serializers.CharField()


# --- Preemption with notice (issue 32) ---
class ListedNoticeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.ChoiceField(choices=["preempted", "max_runtime"])
    deadline = serializers.DateTimeField(help_text="When the run is killed (NeoCloud's clock).")
    grace_s = serializers.FloatField(help_text="Seconds left until then, when listed.")


class ListedVolumeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    type = serializers.CharField(help_text="local or shared")
    host_path = serializers.CharField(
        allow_blank=True, help_text="A shared volume's directory; blank: the agent's own."
    )
    path = serializers.CharField(help_text="Where the run sees it, under /mnt/.")
    read_only = serializers.BooleanField()  # type: ignore[assignment]  # a field, not the flag


class SshAccessSerializer(serializers.Serializer):  # type: ignore[type-arg]
    authorized_keys = serializers.ListField(
        child=serializers.CharField(), help_text="authorized_keys lines of the project's members"
    )


class IdleStopSerializer(serializers.Serializer):  # type: ignore[type-arg]
    after_s = serializers.FloatField(help_text="without SSH sessions nor GPU use this long")
    gpu_below_pct = serializers.FloatField(help_text="a GPU under this utilisation is unused")


class ListedAssignmentSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    workload_id = serializers.UUIDField()
    allocation_id = serializers.UUIDField()
    workload_name = serializers.CharField()
    desired = serializers.ChoiceField(choices=["run", "stop"])
    rank = serializers.IntegerField()
    node_count = serializers.IntegerField()
    argv = serializers.ListField(child=serializers.CharField())
    image = serializers.CharField(allow_blank=True)
    working_dir = serializers.CharField(allow_blank=True)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True))
    gpus = GpuRefSerializer(many=True)
    ports = serializers.ListField(child=serializers.IntegerField())
    cpu_milli = serializers.IntegerField()
    memory_mib = serializers.IntegerField()
    volumes = ListedVolumeSerializer(many=True)
    stop_grace_s = serializers.FloatField()
    last_seq = serializers.IntegerField()
    notice = ListedNoticeSerializer(allow_null=True)
    restarts = serializers.IntegerField(help_text="Runs of the workload before this one.")
    ssh = SshAccessSerializer(required=False, help_text="present when the run takes SSH")
    idle_stop = IdleStopSerializer(required=False, help_text="a dev environment's idle stop")


class AssignmentsListingSerializer(serializers.Serializer):  # type: ignore[type-arg]
    version = serializers.CharField(help_text="Opaque digest of the (id, desired) pairs.")
    assignments = ListedAssignmentSerializer(many=True)


class StrictObjectSerializer(StrictType, serializers.Serializer):  # type: ignore[type-arg]
    """A nested object, and only an object."""

    accepts: ClassVar[tuple[type, ...]] = (dict,)
    expected: ClassVar[str] = "an object"


class CgroupsSerializer(StrictObjectSerializer):
    applied = StrictBooleanField()
    note = StrictCharField(max_length=300, required=False, default="", allow_blank=True)


class ReportedPortSerializer(serializers.Serializer):  # type: ignore[type-arg]
    port = StrictIntegerField(min_value=1, max_value=65535)
    address = StrictCharField(max_length=300)
    kind = StrictChoiceField(choices=ENDPOINT_KINDS, required=False, default="port")


class ReportSerializer(serializers.Serializer):  # type: ignore[type-arg]
    assignment_id = StrictUUIDField()
    seq = StrictIntegerField(min_value=1, max_value=MAX_PID)
    kind = StrictChoiceField(choices=REPORT_KINDS)
    at = StrictDateTimeField()
    pid = StrictIntegerField(min_value=0, max_value=MAX_PID, required=False, allow_null=True)
    container_id = StrictCharField(max_length=128, required=False, default="", allow_blank=True)
    exit_code = StrictIntegerField(
        min_value=-MAX_PID, max_value=MAX_PID, required=False, allow_null=True
    )
    signal = StrictIntegerField(min_value=1, max_value=128, required=False, allow_null=True)
    oom = StrictBooleanField(required=False, default=False)
    message = StrictCharField(max_length=2000, required=False, default="", allow_blank=True)
    cgroups = CgroupsSerializer(required=False, allow_null=True)
    ports = ReportedPortSerializer(many=True, max_length=32, required=False, default=list)  # type: ignore[call-arg]


class ReportsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reports = ReportSerializer(many=True, max_length=MAX_REPORTS)  # type: ignore[call-arg]


class ReportsAckSerializer(serializers.Serializer):  # type: ignore[type-arg]
    applied = serializers.ListField(
        child=serializers.ListField(), help_text="[assignment_id, seq] pairs applied."
    )
    duplicates = serializers.ListField(
        child=serializers.ListField(), help_text="[assignment_id, seq] pairs already applied."
    )


class ChunkSerializer(serializers.Serializer):  # type: ignore[type-arg]
    assignment_id = StrictUUIDField()
    offset = StrictIntegerField(min_value=0, max_value=MAX_OFFSET)
    data = StrictCharField(  # type: ignore[assignment]  # a field, not Serializer.data
        max_length=4 * ((MAX_CHUNK_BYTES + 2) // 3),
        allow_blank=True,
        trim_whitespace=False,
        help_text="Base64 of at most 64 KiB.",
    )

    def validate_data(self, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("Not base64.", code="base64") from None


class DroppedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    assignment_id = StrictUUIDField()
    bytes = StrictIntegerField(min_value=0, max_value=MAX_OFFSET)


class LogsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    chunks = ChunkSerializer(many=True, max_length=MAX_CHUNKS, required=False, default=list)  # type: ignore[call-arg]
    dropped = DroppedSerializer(many=True, max_length=MAX_CHUNKS, required=False, default=list)  # type: ignore[call-arg]

    def validate_chunks(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if sum(len(c["data"]) for c in chunks) > MAX_CHUNKS_BYTES:
            raise serializers.ValidationError(
                f"At most {MAX_CHUNKS_BYTES} bytes of chunks a request.", code="max_length"
            )
        return chunks


class LogsAckSerializer(serializers.Serializer):  # type: ignore[type-arg]
    next_offset = serializers.DictField(
        child=serializers.IntegerField(), help_text="Per assignment: where to ship from next."
    )


# --- the customer's side ---------------------------------------------------------------------


class LogsQuerySerializer(QuerySerializer):
    cursor = serializers.RegexField(
        r"^[0-9]{1,19}$", required=False, help_text="Opaque: the last answer's `cursor`."
    )
    follow = serializers.BooleanField(
        default=False, help_text="Wait up to `wait` s for entries past the cursor."
    )
    wait = serializers.FloatField(min_value=0, max_value=30, default=20)
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=200)


class LogEntrySerializer(serializers.Serializer):  # type: ignore[type-arg]
    assignment_id = serializers.UUIDField()
    allocation_id = serializers.UUIDField()
    node = serializers.CharField()
    rank = serializers.IntegerField()
    offset = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True, help_text="UTF-8, with replacement.")


class WorkloadLogsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    entries = LogEntrySerializer(many=True)
    cursor = serializers.CharField()
    complete = serializers.BooleanField(
        help_text="The workload is final, every assignment of it ended, and this is the rest."
    )
    truncated_bytes = serializers.IntegerField()
    dropped_bytes = serializers.IntegerField()


class AssignmentGpuSerializer(serializers.Serializer):  # type: ignore[type-arg]
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    utilization_pct = serializers.FloatField(allow_null=True)
    memory_used_mib = serializers.IntegerField(allow_null=True)


class WorkloadAssignmentSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    allocation_id = serializers.UUIDField()
    node = serializers.CharField()
    rank = serializers.IntegerField()
    node_count = serializers.IntegerField()
    gpus = AssignmentGpuSerializer(many=True)
    # A string, not an enum: the schema's "state" enum is the node's (one name, one set).
    state = serializers.CharField(help_text=f"One of: {', '.join(AssignmentState.values)}.")
    pid = serializers.IntegerField(allow_null=True)
    container_id = serializers.CharField(allow_blank=True)
    exit_code = serializers.IntegerField(allow_null=True)
    signal = serializers.IntegerField(allow_null=True)
    oom = serializers.BooleanField()
    message = serializers.CharField(allow_blank=True)
    cgroups_note = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
