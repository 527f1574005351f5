"""API shapes of workloads, reservations and queues."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from neocloud.api.bodies import QuerySerializer, RequestSerializer
from neocloud.api.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictDateTimeField,
    StrictDictField,
    StrictFloatField,
    StrictIntegerField,
    StrictListField,
    StrictPrimaryKeyRelatedField,
    StrictSlugField,
    StrictUUIDField,
    UniqueListField,
)
from neocloud.core.errors import ValidationFailed
from scheduler import hooks
from scheduler.engine import Topology
from scheduler.engine.forecast import Basis
from scheduler.models import Allocation, Reservation, Workload, WorkloadWait
from scheduler.selectors import WorkloadState, estimate_message, ssh_commands
from scheduler.specs import (
    MAX_ARG_BYTES,
    MAX_ARGS,
    MAX_CPU_MILLI,
    MAX_ENV,
    MAX_ENV_VALUE_BYTES,
    MAX_GPUS_PER_NODE,
    MAX_IMAGE_BYTES,
    MAX_MEMORY_MIB,
    MAX_NODES,
    MAX_PATH_BYTES,
    MAX_PORTS,
    MAX_RESERVED_GPUS,
    MAX_RETRY_LIMIT,
    MAX_RUNTIME_S,
    MAX_SECRETS,
    MAX_VOLUMES,
    PricePlan,
    RestartPolicy,
    VolumeMount,
    WorkloadKind,
    WorkloadSpec,
    program,
)
from tenants.models import Project
from tenants.secrets import MAX_VARIABLE_NAME


class PendingReasonSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = WorkloadWait
        fields = ["code", "message", "figures", "updated_at"]


class AllocationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Allocation
        fields = [
            "id",
            "gpu_model",
            "placements",
            "gpu_milli",
            "granted_at",
            "released_at",
            "release_reason",
        ]


class UtilisationSerializer(serializers.Serializer):  # type: ignore[type-arg]
    gpus = serializers.IntegerField(help_text="GPUs allocated to the run.")
    utilization_pct = serializers.FloatField(
        allow_null=True, help_text="Their mean utilisation, of those reporting one."
    )
    memory_used_mib = serializers.IntegerField()
    idle = serializers.BooleanField(
        help_text="Every allocated GPU idle for longer than GPU_IDLE_FLAG_AFTER_S."
    )
    idle_since = serializers.DateTimeField(allow_null=True)
    telemetry_at = serializers.DateTimeField(help_text="The oldest of their last reports.")


def _moment(at: datetime | None) -> str | None:
    """A time as the API writes times."""
    return None if at is None else serializers.DateTimeField().to_representation(at)


class EstimateRangeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    earliest = serializers.DateTimeField(
        allow_null=True, help_text="If the work ahead runs as short as it often does (10 %)."
    )
    latest = serializers.DateTimeField(
        allow_null=True,
        help_text="If it runs as long as it often does (90 %); null: beyond the horizon.",
    )


# A workload with its state beside its row, given in the context as ``states``
# (``selectors.workload_states`` of the workloads shown). No docstring: it would be the schema's.
class WorkloadSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    placement = serializers.SerializerMethodField()
    pending_reason = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField()
    utilisation = serializers.SerializerMethodField()
    estimated_start = serializers.SerializerMethodField()
    estimated_start_range = serializers.SerializerMethodField()
    estimate_basis = serializers.SerializerMethodField()
    estimate_message = serializers.SerializerMethodField()
    estimated_at = serializers.SerializerMethodField()
    ssh_commands = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = [
            "id",
            "organization",
            "project",
            "cluster_id",
            "name",
            "kind",
            "status",
            "status_reason",
            "gpu_models",
            "gpus_per_node",
            "nodes",
            "min_nodes",
            "gpu_milli",
            "cpu_milli",
            "memory_mib",
            "priority_class",
            "priority",
            "preemptible",
            "topology",
            "runtime_estimate_s",
            "max_runtime_s",
            "retry_limit",
            "restart_policy",
            "reservation_id",
            "price_plan",
            "offering",
            "order_id",
            "command",
            "image",
            "env",
            "secrets",
            "working_dir",
            "ports",
            "volumes",
            "http_ports",
            "ssh",
            "ssh_commands",
            "idle_stop_s",
            "endpoints",
            "runs",
            "failures",
            "preemptions",
            "submitted_at",
            "started_at",
            "finished_at",
            "placement",
            "pending_reason",
            "queue_position",
            "utilisation",
            "estimated_start",
            "estimated_start_range",
            "estimate_basis",
            "estimate_message",
            "estimated_at",
        ]

    def _state(self, workload: Workload) -> WorkloadState:
        states: dict[uuid.UUID, WorkloadState] = self.context["states"]
        return states[workload.pk]

    def get_ssh_commands(self, workload: Workload) -> list[str]:
        """How to log in to its runs (``ssh: true``), once their agents reported the port."""
        return ssh_commands(workload)

    def get_placement(self, workload: Workload) -> dict[str, Any] | None:
        """The allocation held now: exact nodes and GPU indices."""
        allocation = self._state(workload).placement
        return AllocationSerializer(allocation).data if allocation else None

    def get_pending_reason(self, workload: Workload) -> dict[str, Any] | None:
        wait = self._state(workload).pending_reason
        return PendingReasonSerializer(wait).data if wait else None

    def get_queue_position(self, workload: Workload) -> int | None:
        """While it waits: its place in its cluster's line, in the order the scheduler's next
        cycle considers waiting work (effective priority with aging, fair share, arrival);
        1: the first."""
        return self._state(workload).queue_position

    @extend_schema_field(UtilisationSerializer(allow_null=True))
    def get_utilisation(self, workload: Workload) -> dict[str, Any] | None:
        """While it runs: how much of what it holds it uses (null before any GPU of it
        reported, and when it does not run)."""
        utilisation = self._state(workload).utilisation
        return dict(UtilisationSerializer(utilisation).data) if utilisation else None

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_estimated_start(self, workload: Workload) -> str | None:
        """While it waits: when it is expected to start, by the engine run forward from its
        cluster's state (every few seconds, off the scheduling path). Null before the first
        estimate, when it does not wait, and when it can never start (basis ``never``) or
        does not start within the forecast's horizon (``beyond_horizon``)."""
        estimate = self._state(workload).estimate
        return _moment(estimate.estimated_start) if estimate else None

    @extend_schema_field(EstimateRangeSerializer(allow_null=True))
    def get_estimated_start_range(self, workload: Workload) -> dict[str, Any] | None:
        """The range of ``estimated_start``: the work ahead running short (10th percentile
        of its runtimes) and long (90th)."""
        estimate = self._state(workload).estimate
        if estimate is None or estimate.estimated_start is None:
            return None
        return dict(EstimateRangeSerializer(estimate).data)

    @extend_schema_field(
        serializers.ListField(
            child=serializers.ChoiceField(choices=[b.value for b in Basis]), allow_null=True
        )
    )
    def get_estimate_basis(self, workload: Workload) -> list[str] | None:
        """What the estimate rests on: ``runtime_estimates`` (users' estimates of the work
        ahead, corrected by history), ``learned_runtimes`` (runtimes learned from past runs
        where none was given), ``default_runtimes`` (neither), ``reservation``,
        ``head_of_line``, ``quota`` (what it waits for), ``now`` (it starts in the next
        cycle), ``never`` (nothing in the cluster could ever hold it), ``beyond_horizon``."""
        estimate = self._state(workload).estimate
        return list(estimate.basis) if estimate else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_estimate_message(self, workload: Workload) -> str | None:
        """The basis in a sentence; says so when it can never start."""
        estimate = self._state(workload).estimate
        return estimate_message(workload, estimate) if estimate else None

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_estimated_at(self, workload: Workload) -> str | None:
        """When the estimate was made."""
        estimate = self._state(workload).estimate
        return _moment(estimate.computed_at) if estimate else None


class ProgramFields(RequestSerializer):
    """What a workload runs: in a workload's request, and an order's. ``workload_submit``
    holds the finer bounds (bytes, names, the image's grammar, secrets of the project)."""

    command = StrictListField(
        child=StrictCharField(max_length=MAX_ARG_BYTES, allow_blank=True, trim_whitespace=False),
        max_length=MAX_ARGS,
        required=False,
        help_text="argv; empty: the image's entrypoint. Nothing runs it yet.",
    )
    image = StrictCharField(
        max_length=MAX_IMAGE_BYTES, required=False, allow_null=True, help_text="OCI reference"
    )
    env = StrictDictField(
        child=StrictCharField(
            max_length=MAX_ENV_VALUE_BYTES, allow_blank=True, trim_whitespace=False
        ),
        max_length=MAX_ENV,
        required=False,
        help_text="plain variables, name to value",
    )
    secrets = UniqueListField(
        child=StrictCharField(max_length=MAX_VARIABLE_NAME),
        max_length=MAX_SECRETS,
        required=False,
        help_text="names of project secrets given as variables of those names",
    )
    working_dir = StrictCharField(max_length=MAX_PATH_BYTES, required=False, allow_null=True)
    ports = UniqueListField(
        child=StrictIntegerField(min_value=1, max_value=65535),
        max_length=MAX_PORTS,
        required=False,
        help_text="a service's ports; the addresses they are reached at are its endpoints",
    )


class VolumeMountSerializer(RequestSerializer):
    """A volume a workload's runs mount (``services.volumes`` checks the rest)."""

    volume = StrictUUIDField()
    path = StrictCharField(max_length=MAX_PATH_BYTES, help_text="under /mnt/, the run's own")
    # The metaclass takes declared fields off the class: the name shadows no Field attribute.
    read_only = StrictBooleanField(default=False)  # type: ignore[assignment]


class WorkloadCreateSerializer(ProgramFields):
    ssh = StrictBooleanField(
        required=False,
        default=False,
        help_text="run an sshd beside it for the project's members' SSH keys",
    )
    idle_stop_s = StrictFloatField(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        max_value=MAX_RUNTIME_S,
        help_text="dev: stopped after this long without SSH sessions or GPU use",
    )
    project = StrictPrimaryKeyRelatedField(queryset=Project.objects.all())
    http_ports = UniqueListField(
        child=StrictIntegerField(min_value=1, max_value=65535),
        max_length=MAX_PORTS,
        required=False,
        help_text="those of ports served by the web gateway at a URL of their own",
    )
    name = StrictCharField(max_length=128)
    kind = StrictChoiceField(
        choices=[k.value for k in WorkloadKind], default=WorkloadKind.JOB.value
    )
    offering = StrictSlugField(
        max_length=64, required=False, help_text="fill the rest from an offering"
    )
    quantity = StrictIntegerField(
        min_value=1,
        max_value=MAX_NODES,
        required=False,
        help_text="with an offering: instances or replicas",
    )
    gpu_model = StrictSlugField(
        max_length=64, required=False, help_text="with an offering: its model"
    )
    gpu_models = UniqueListField(
        child=StrictSlugField(max_length=64), required=False, default=list, max_length=16
    )
    gpus_per_node = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_NODE, default=1)
    nodes = StrictIntegerField(min_value=1, max_value=MAX_NODES, default=1)
    min_nodes = StrictIntegerField(
        min_value=1, max_value=MAX_NODES, required=False, allow_null=True
    )
    gpu_milli = StrictIntegerField(min_value=1, max_value=1000, default=1000)
    cpu_milli = StrictIntegerField(min_value=0, max_value=MAX_CPU_MILLI, default=0)
    memory_mib = StrictIntegerField(min_value=0, max_value=MAX_MEMORY_MIB, default=0)
    priority_class = StrictSlugField(max_length=64, default="standard")
    preemptible = StrictBooleanField(default=False)
    topology = StrictChoiceField(choices=[t.value for t in Topology], default=Topology.ANY.value)
    runtime_estimate_s = StrictFloatField(
        min_value=0.001, max_value=MAX_RUNTIME_S, required=False, allow_null=True
    )
    max_runtime_s = StrictFloatField(
        min_value=0.001, max_value=MAX_RUNTIME_S, required=False, allow_null=True
    )
    retry_limit = StrictIntegerField(min_value=0, max_value=MAX_RETRY_LIMIT, default=0)
    restart_policy = StrictChoiceField(
        choices=[p.value for p in RestartPolicy], default=RestartPolicy.NEVER.value
    )
    region = StrictSlugField(max_length=64, required=False, allow_null=True)
    reservation = StrictUUIDField(required=False, allow_null=True)
    price_plan = StrictChoiceField(
        choices=[p.value for p in PricePlan],
        required=False,
        help_text="follows from the workload (reservation, preemptible, else on demand);"
        " naming another is refused",
    )
    volumes = VolumeMountSerializer(many=True, required=False, max_length=MAX_VOLUMES)  # type: ignore[call-arg]


class WorkloadCreateQuerySerializer(QuerySerializer):
    """The query of a submission: a misspelt ``dry_run`` dropped would submit for real."""

    dry_run = serializers.BooleanField(
        default=False,
        help_text="Only check: 200 with whether it could run now and if not why; nothing"
        " is written (an Idempotency-Key is not used up).",
    )


class DryRunPlacementSerializer(serializers.Serializer):  # type: ignore[type-arg]
    node_id = serializers.UUIDField()
    node = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())
    gpu_milli = serializers.IntegerField()
    cpu_milli = serializers.IntegerField()
    memory_mib = serializers.IntegerField()


class DryRunReasonSerializer(serializers.Serializer):  # type: ignore[type-arg]
    code = serializers.CharField()
    message = serializers.CharField()
    figures = serializers.DictField()


class DryRunSerializer(serializers.Serializer):  # type: ignore[type-arg]
    could_run_now = serializers.BooleanField(
        help_text="Whether the scheduler would place it now, on the cluster as it is."
    )
    reason = DryRunReasonSerializer(
        allow_null=True, help_text="If not, why: the pending_reason it would get."
    )
    gpu_model = serializers.CharField(allow_null=True)
    placement = DryRunPlacementSerializer(
        many=True, allow_null=True, help_text="If so, where: nodes and GPU indices."
    )
    preempts = serializers.IntegerField(
        help_text="Running workloads it would take GPUs back from to start."
    )


class WorkloadCancelSerializer(RequestSerializer):
    reason = StrictCharField(max_length=200, required=False, default="")


class ReservationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Reservation
        fields = [
            "id",
            "organization",
            "project",
            "cluster_id",
            "gpu_model",
            "gpus",
            "starts_at",
            "ends_at",
            "status",
            "offering",
            "order_id",
            "created_at",
            "cancelled_at",
            "cancellation_charged",
        ]
        extra_kwargs = {
            "cancellation_charged": {
                "help_text": "cancelled, and its whole window is still billed: cancelled inside"
                " the notice period before its start, or after it (null while active)"
            }
        }


class ReservationCreateSerializer(RequestSerializer):
    project = StrictPrimaryKeyRelatedField(queryset=Project.objects.all())
    gpu_model = StrictSlugField(max_length=64)
    gpus = StrictIntegerField(min_value=1, max_value=MAX_RESERVED_GPUS)
    starts_at = StrictDateTimeField()
    ends_at = StrictDateTimeField()
    region = StrictSlugField(max_length=64, required=False, allow_null=True)


class QueueUsageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    gpu_model = serializers.CharField()
    used = serializers.FloatField()
    quota = serializers.IntegerField(allow_null=True)


class QueueSerializer(serializers.Serializer):  # type: ignore[type-arg]
    project = serializers.UUIDField()
    organization = serializers.UUIDField()
    cohort = serializers.CharField()
    borrowing_limit = serializers.IntegerField(allow_null=True)
    lending_limit = serializers.IntegerField(allow_null=True)
    weight = serializers.FloatField()
    depth = serializers.IntegerField(help_text="workloads waiting")
    running = serializers.IntegerField(help_text="workloads holding GPUs")
    usage = QueueUsageSerializer(many=True)


class ModelAllocationSerializer(serializers.Serializer):  # type: ignore[type-arg]
    gpu_model = serializers.CharField()
    total = serializers.IntegerField()
    allocated = serializers.FloatField()
    free = serializers.IntegerField(help_text="whole GPUs free on nodes that take work")
    unschedulable_free = serializers.IntegerField(help_text="free on nodes that take no work")
    free_unusable_by_shape = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="by GPUs per node: free GPUs on nodes with fewer free than that",
    )


class ClusterAllocationSerializer(serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.CharField()
    cluster_id = serializers.UUIDField()
    gpu_models = ModelAllocationSerializer(many=True)


def workload_spec_of(data: dict[str, Any], raw: Any) -> WorkloadSpec:
    """The spec a validated ``WorkloadCreateSerializer`` asks for (``raw``: the data it was
    given, to tell what was given); with an offering, the offering's terms fill the rest."""
    spec = _spec_of(data, raw)
    mounts = tuple(VolumeMount(**m) for m in data.get("volumes") or ())
    return replace(spec, volumes=mounts) if mounts else spec


def _spec_of(data: dict[str, Any], raw: Any) -> WorkloadSpec:
    offering = data.pop("offering", None)
    if offering:
        # Web ports are the request's own: offerings carry ports, not which serve the web.
        given = {
            k: v
            for k, v in data.items()
            if k in raw and k not in {"region", "volumes", "http_ports"}
        }
        spec = hooks.offering_workload_spec.first(offering, data.get("region"), given)
        if spec is None:
            raise ValidationFailed(
                "no catalog to run offerings from", fields={"offering": ["unknown"]}
            )
        return dataclasses.replace(spec, http_ports=tuple(data.get("http_ports") or ()))
    return WorkloadSpec(
        name=data["name"],
        gpu_models=tuple(data["gpu_models"]),
        kind=WorkloadKind(data["kind"]),
        gpus_per_node=data["gpus_per_node"],
        nodes=data["nodes"],
        min_nodes=data.get("min_nodes"),
        gpu_milli=data["gpu_milli"],
        cpu_milli=data["cpu_milli"],
        memory_mib=data["memory_mib"],
        priority_class=data["priority_class"],
        preemptible=data["preemptible"],
        topology=data["topology"],
        runtime_estimate_s=data.get("runtime_estimate_s"),
        max_runtime_s=data.get("max_runtime_s"),
        retry_limit=data["retry_limit"],
        restart_policy=RestartPolicy(data["restart_policy"]),
        region=data.get("region"),
        reservation=data.get("reservation"),
        price_plan=PricePlan(data["price_plan"]) if data.get("price_plan") else None,
        ssh=data.get("ssh", False),
        idle_stop_s=data.get("idle_stop_s"),
        **program(data),
        http_ports=tuple(data.get("http_ports") or ()),
    )
