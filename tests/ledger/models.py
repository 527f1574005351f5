from django.db import models


class Account(models.Model):
    """Synchronous projection: one row per account stream."""

    stream_id = models.CharField(max_length=128, unique=True)
    owner = models.CharField(max_length=64)
    balance_cents = models.BigIntegerField(default=0)
    movements = models.IntegerField(default=0)
    closed = models.BooleanField(default=False)


class Movement(models.Model):
    """Synchronous projection: one row per money movement."""

    position = models.BigIntegerField(unique=True)
    account = models.ForeignKey(Account, on_delete=models.CASCADE)
    amount_cents = models.BigIntegerField()


class OwnerTotal(models.Model):
    """Asynchronous projection: deposits per owner, kept by a consumer."""

    owner = models.CharField(max_length=64, unique=True)
    deposited_cents = models.BigIntegerField(default=0)


class Effect(models.Model):
    """What a test consumer did, one row per handled event (no unique key: repeats show)."""

    consumer = models.CharField(max_length=64)
    position = models.BigIntegerField()
