from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "tests.ledger"
    label = "ledger"
