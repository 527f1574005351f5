"""The ledger's projections, registered when the app registry is ready."""

from __future__ import annotations

from django.db.models import F

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from tests.ledger.events import AccountClosed, AccountOpened, Deposited, Withdrawn
from tests.ledger.models import Account, Movement, OwnerTotal


class Balances(projections.Projection):
    name = "ledger.balances"
    models = (Account, Movement)

    @handles(AccountOpened)
    def opened(self, event: RecordedEvent) -> None:
        Account.objects.create(stream_id=event.stream_id, owner=event.data["owner"])

    @handles(Deposited, Withdrawn)
    def moved(self, event: RecordedEvent) -> None:
        sign = 1 if event.type == Deposited.event_type else -1
        amount = sign * event.data["amount_cents"]
        account = Account.objects.get(stream_id=event.stream_id)
        Movement.objects.create(position=event.position, account=account, amount_cents=amount)
        Account.objects.filter(pk=account.pk).update(
            balance_cents=F("balance_cents") + amount, movements=F("movements") + 1
        )

    @handles(AccountClosed)
    def closed(self, event: RecordedEvent) -> None:
        Account.objects.filter(stream_id=event.stream_id).update(closed=True)


class OwnerTotals(projections.Projection):
    name = "ledger.owner_totals"
    models = (OwnerTotal,)

    @handles(Deposited)
    def deposited(self, event: RecordedEvent) -> None:
        owner = Account.objects.get(stream_id=event.stream_id).owner
        total, _ = OwnerTotal.objects.get_or_create(owner=owner)
        OwnerTotal.objects.filter(pk=total.pk).update(
            deposited_cents=F("deposited_cents") + event.data["amount_cents"]
        )


projections.register(Balances(), synchronous=True)
projections.register(OwnerTotals(), synchronous=False)
