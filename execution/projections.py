"""The assignments table, kept from the run and assignment streams inside each append.

A report moves an assignment forward only: ``started`` from assigned, an end from anything
not ended. A report that comes too late to move it (a ``started`` after an ``exited``) is
still in the log, and still advances ``last_seq``.
"""

from __future__ import annotations

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from execution import events as ev
from execution.models import ENDED_STATES, Assignment, AssignmentState


class Execution(projections.Projection):
    name = "execution.assignments"
    models = (Assignment,)

    @handles(ev.AssignmentsCreated)
    def assignments_created(self, event: RecordedEvent) -> None:
        data = event.data
        Assignment.objects.bulk_create(
            Assignment(
                id=part["assignment_id"],
                organization_id=data["organization_id"],
                project_id=data["project_id"],
                allocation_id=data["allocation_id"],
                workload_id=data["workload_id"],
                node_id=part["node_id"],
                rank=part["rank"],
                node_count=len(data["assignments"]),
                gpus=part["gpus"],
                created_at=event.recorded_at,
            )
            for part in data["assignments"]
        )

    @handles(ev.AssignmentReported)
    def reported(self, event: RecordedEvent) -> None:
        data = event.data
        assignment = Assignment.objects.get(pk=event.stream_id)
        assignment.last_seq = max(assignment.last_seq, data["seq"])
        assignment.version = event.version
        kind = data["kind"]
        if kind == "started" and assignment.state == AssignmentState.ASSIGNED:
            assignment.state = AssignmentState.RUNNING
            assignment.pid = data["pid"]
            assignment.container_id = data["container_id"]
            assignment.cgroups_note = data["cgroups_note"]
            assignment.started_at = data["at"]
        elif kind in {"exited", "start_failed"} and assignment.state not in ENDED_STATES:
            assignment.state = (
                AssignmentState.EXITED if kind == "exited" else AssignmentState.START_FAILED
            )
            assignment.exit_code = data["exit_code"]
            assignment.signal = data["signal"]
            assignment.oom = data["oom"]
            assignment.message = data["message"]
            assignment.ended_at = data["at"]
        assignment.save()


projections.register(Execution(), synchronous=True)
