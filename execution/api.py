"""Execution endpoints. Node agents (``Authorization: Node <token>``, no throttle) fetch
their assignments, report how they go and ship their output (PROTOCOL §2-§4); customers
read a workload's assignments and output, scoped like the workload itself (§5)."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.http.response import HttpResponseBase
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from execution import events as ev
from execution import longpoll, selectors, services
from execution import serializers as s
from execution.models import Assignment
from execution.selectors import Listed
from inventory.api import IsNodeAgent
from inventory.authentication import NodeTokenAuthentication
from inventory.models import Node
from neocloud.api.schema import ErrorSerializer
from neocloud.core.transactions import atomic_with_retry
from scheduler.models import Workload
from tenants.access import Action, Actor
from tenants.viewsets import TenantViewSet

BAD_QUERY = OpenApiResponse(ErrorSerializer, description="Invalid query parameter: see `fields`.")


def _query(serializer_class: type[Any], request: Request) -> dict[str, Any]:
    data = serializer_class(data=request.query_params)
    data.is_valid(raise_exception=True)
    return dict(data.validated_data)


class NodeAgentView(APIView):
    """Base of the agent's endpoints: the node is the token's (``request.auth``)."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes: list[Any] = []

    @property
    def node(self) -> Node:
        return cast(Node, self.request.auth)  # IsNodeAgent made sure

    @property
    def actor(self) -> Actor:
        return Actor.system_actor(f"node:{self.node.name}")


class NodeAssignmentsView(NodeAgentView):
    """What the node runs: each assignment with its desired state (run or stop) and all it
    needs to run. Long poll: with ``since`` equal to the current version, waits up to
    ``wait`` s for a change (``execution.longpoll``: ``waited`` once it did). The environment
    holds the workload's secrets' values: this answer is the only place they leave the
    control plane."""

    @extend_schema(
        parameters=[s.AssignmentsQuerySerializer],
        responses={200: s.AssignmentsListingSerializer, 400: BAD_QUERY},
    )
    def get(self, request: Request, pk: str, waited: bool = False) -> HttpResponseBase:
        query = _query(s.AssignmentsQuerySerializer, request)
        since, node = query.get("since"), self.node
        if (
            since is not None
            and query["wait"] > 0
            and not waited
            and selectors.node_desired_version(node) == since
        ):
            return longpoll.Waiting(
                topics=longpoll.node_topics(),
                ready=lambda: selectors.node_desired_version(node) != since,
                wait_s=query["wait"],
            )
        version, listed = selectors.node_assignments(self.node)
        return Response({"version": version, "assignments": [_listed(a) for a in listed]})


def _listed(listed: Listed) -> dict[str, Any]:
    assignment, workload, notice = listed.assignment, listed.workload, listed.notice
    return {
        "id": str(assignment.pk),
        "workload_id": str(workload.pk),
        "allocation_id": str(assignment.allocation_id),
        "workload_name": workload.name,
        "desired": listed.desired,
        "rank": assignment.rank,
        "node_count": assignment.node_count,
        "argv": list(workload.command),
        "image": workload.image,
        "working_dir": workload.working_dir,
        "env": listed.env,
        "gpus": listed.gpus,
        "ports": list(workload.ports),
        "cpu_milli": listed.cpu_milli,
        "memory_mib": listed.memory_mib,
        "volumes": listed.volumes,
        "stop_grace_s": notice.grace_s if notice else selectors.stop_grace_s(),
        "last_seq": assignment.last_seq,
        # issue 32: the run's sshd and the keys it takes (absent: no SSH)
        **({} if listed.ssh_keys is None else {"ssh": {"authorized_keys": listed.ssh_keys}}),
        **_idle_stop(workload),
        # Preemption with notice, and resume (issue 32).
        "notice": _notice(notice),
        "restarts": listed.restarts,
    }


def _notice(notice: selectors.Notice | None) -> dict[str, Any] | None:
    if notice is None:
        return None
    return {
        "reason": notice.reason,
        "deadline": notice.deadline.isoformat(),
        "grace_s": round(notice.grace_s, 3),
    }


def _idle_stop(workload: Workload) -> dict[str, Any]:
    """A dev environment's idle stop, for its agent to apply (issue 32)."""
    if workload.idle_stop_s is None:
        return {}
    pct = settings.GPU_IDLE_THRESHOLD_PCT
    return {"idle_stop": {"after_s": workload.idle_stop_s, "gpu_below_pct": pct}}


class NodeReportsView(NodeAgentView):
    """How the node's runs go: started, start_failed, exited, ports. ``(assignment_id,
    seq)`` is the idempotency key: a resent report is acknowledged as a duplicate."""

    @extend_schema(request=s.ReportsSerializer, responses=s.ReportsAckSerializer)
    def post(self, request: Request, pk: str) -> Response:
        data = s.ReportsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reports = [_report(r) for r in data.validated_data["reports"]]
        outcome = atomic_with_retry(
            services.reports_apply, actor=self.actor, node=self.node, reports=reports
        )
        return Response(
            {
                "applied": [[str(i), seq] for i, seq in outcome.applied],
                "duplicates": [[str(i), seq] for i, seq in outcome.duplicates],
            }
        )


def _report(data: dict[str, Any]) -> services.Report:
    cgroups = data.pop("cgroups", None) or {}
    return services.Report(
        assignment_id=data.pop("assignment_id"),
        event=ev.AssignmentReported(
            **data, cgroups_applied=cgroups.get("applied"), cgroups_note=cgroups.get("note", "")
        ),
    )


class NodeLogsView(NodeAgentView):
    """The output of the node's runs, in chunks at byte offsets, and what the agent could
    not buffer (``dropped``). The answer says where to ship from next per assignment."""

    @extend_schema(request=s.LogsSerializer, responses=s.LogsAckSerializer)
    def post(self, request: Request, pk: str) -> Response:
        data = s.LogsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        next_offset = atomic_with_retry(
            services.logs_append,
            node=self.node,
            chunks=[services.Chunk(**c) for c in data.validated_data["chunks"]],
            dropped=[(d["assignment_id"], d["bytes"]) for d in data.validated_data["dropped"]],
        )
        return Response({"next_offset": {str(i): n for i, n in next_offset.items()}})


class WorkloadExecutionViewSet(TenantViewSet):
    """A workload's assignments and output, for whoever may read the workload."""

    queryset = Workload.objects.all()
    read_action = Action.WORKLOAD_READ
    filter_backends: list[Any] = []
    pagination_class = None  # type: ignore[assignment]

    def get_throttles(self) -> list[Any]:
        # The answer after a wait is the same request's: it was counted when it came in.
        return [] if self.kwargs.get("waited") else super().get_throttles()

    @extend_schema(
        parameters=[s.LogsQuerySerializer],
        responses={200: s.WorkloadLogsSerializer, 400: BAD_QUERY},
    )
    def logs(self, request: Request, pk: str, waited: bool = False) -> HttpResponseBase:
        """The output of every run, oldest first, past ``cursor``; with ``follow=true``
        waits up to ``wait`` s for more (``execution.longpoll``: ``waited`` once it did),
        in one of the caller's and the organization's follow slots."""
        query = _query(s.LogsQuerySerializer, request)
        workload, cursor = self.get_object(), int(query.get("cursor", 0))
        if (
            query["follow"]
            and query["wait"] > 0
            and not waited
            and selectors.workload_output_waits(workload.pk, cursor=cursor)
        ):
            release = longpoll.follow_slot(
                caller=self.actor.label, organization_id=workload.organization_id
            )
            return longpoll.Waiting(
                topics=longpoll.output_topics(workload.pk),
                ready=lambda: not selectors.workload_output_waits(workload.pk, cursor=cursor),
                wait_s=query["wait"],
                release=release,
            )
        output = selectors.workload_output(workload, cursor=cursor, limit=query["limit"])
        entries = [
            {
                "assignment_id": str(chunk.assignment_id),
                "allocation_id": str(chunk.assignment.allocation_id),
                "node": chunk.assignment.node.name,
                "rank": chunk.assignment.rank,
                "offset": chunk.offset,
                "text": bytes(chunk.data).decode("utf-8", errors="replace"),
            }
            for chunk in output.chunks
        ]
        return Response(
            {
                "entries": entries,
                "cursor": str(output.cursor),
                "complete": output.complete,
                "truncated_bytes": output.truncated_bytes,
                "dropped_bytes": output.dropped_bytes,
            }
        )

    @extend_schema(responses=s.WorkloadAssignmentSerializer(many=True))
    def assignments(self, request: Request, pk: str) -> Response:
        """Each node's part of each run, with its GPUs' utilisation as last reported."""
        rows = selectors.workload_assignments(self.get_object())
        return Response([_assignment(a) for a in rows])


def _assignment(assignment: Assignment) -> dict[str, Any]:
    gpus = {gpu.index: gpu for gpu in assignment.node.gpus.all()}
    return {
        "id": str(assignment.pk),
        "allocation_id": str(assignment.allocation_id),
        "node": assignment.node.name,
        "rank": assignment.rank,
        "node_count": assignment.node_count,
        "gpus": [
            {
                "index": index,
                "uuid": gpus[index].uuid if index in gpus else "",
                # Telemetry the fleet's heartbeats carry, where they do.
                "utilization_pct": getattr(gpus.get(index), "utilization_pct", None),
                "memory_used_mib": getattr(gpus.get(index), "memory_used_mib", None),
            }
            for index in assignment.gpus
        ],
        "state": assignment.state,
        "pid": assignment.pid,
        "container_id": assignment.container_id,
        "exit_code": assignment.exit_code,
        "signal": assignment.signal,
        "oom": assignment.oom,
        "message": assignment.message,
        "cgroups_note": assignment.cgroups_note,
        "started_at": assignment.started_at,
        "ended_at": assignment.ended_at,
    }
