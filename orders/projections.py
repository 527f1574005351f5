"""The order tables, kept from the order streams inside each append."""

from __future__ import annotations

from collections.abc import Iterable

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from orders import events as ev
from orders.models import ApprovalPolicy, Order, OrderStatus, OrderStep


class Orders(projections.Projection):
    name = "orders.orders"
    models = (ApprovalPolicy, Order, OrderStep)

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        heads: dict[str, RecordedEvent] = {}
        for event in events:
            self.apply(event)
            if event.stream_type == ev.ORDER_STREAM:
                heads[event.stream_id] = event
        # The stream's version: what the next write to the order must expect.
        for order_id, last in heads.items():
            Order.objects.filter(id=order_id).update(
                version=last.version, updated_at=last.recorded_at
            )

    def _step(self, event: RecordedEvent, status: str, reason: str = "") -> None:
        Order.objects.filter(id=event.stream_id).update(status=status, status_reason=reason)
        OrderStep.objects.create(
            order_id=event.stream_id,
            position=event.position,
            status=status,
            actor=event.metadata.get("actor", ""),
            reason=reason,
            at=event.recorded_at,
        )

    @handles(ev.OrderSubmitted)
    def order_submitted(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        # Older events have no program: the row's defaults stand in.
        data["image"] = data.get("image") or ""
        data["working_dir"] = data.get("working_dir") or ""
        Order.objects.create(
            id=data.pop("order_id"),
            organization_id=event.metadata["organization_id"],
            project_id=data.pop("project_id"),
            **data,
            status=OrderStatus.SUBMITTED,
            submitted_by=event.metadata.get("actor", ""),
            version=event.version,
            created_at=event.recorded_at,
            updated_at=event.recorded_at,
        )
        self._step(event, OrderStatus.SUBMITTED)

    @handles(ev.OrderValidated)
    def order_validated(self, event: RecordedEvent) -> None:
        Order.objects.filter(id=event.stream_id).update(needs_approval=event.data["needs_approval"])
        self._step(event, OrderStatus.VALIDATED, event.data["reason"])

    @handles(ev.OrderApproved)
    def order_approved(self, event: RecordedEvent) -> None:
        self._step(
            event, OrderStatus.APPROVED, "automatic" if event.data["automatic"] else "by operator"
        )

    @handles(ev.OrderRejected)
    def order_rejected(self, event: RecordedEvent) -> None:
        self._step(event, OrderStatus.REJECTED, f"{event.data['code']}: {event.data['reason']}")

    @handles(ev.OrderFulfilled)
    def order_fulfilled(self, event: RecordedEvent) -> None:
        Order.objects.filter(id=event.stream_id).update(
            workload_id=event.data["workload_id"], reservation_id=event.data["reservation_id"]
        )
        self._step(event, OrderStatus.FULFILLED)

    @handles(ev.OrderCancelled)
    def order_cancelled(self, event: RecordedEvent) -> None:
        self._step(event, OrderStatus.CANCELLED, event.data["reason"])

    @handles(ev.OrderClosed)
    def order_closed(self, event: RecordedEvent) -> None:
        self._step(event, OrderStatus.CLOSED, event.data["reason"])

    @handles(ev.ApprovalThresholdSet)
    def approval_threshold_set(self, event: RecordedEvent) -> None:
        ApprovalPolicy.objects.update_or_create(
            id=1,
            defaults={
                "threshold_gpus": event.data["threshold_gpus"],
                "updated_at": event.recorded_at,
            },
        )


projections.register(Orders(), synchronous=True)
