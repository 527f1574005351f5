"""Order fixtures: a fleet with a catalog, and a customer with a key per role."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import User
from tests.builders import Builder
from tests.builders import commerce as commerce_builders


@pytest.fixture
def shop() -> commerce_builders.Shop:
    return commerce_builders.shop()


@pytest.fixture
def customer(build: Builder, shop: commerce_builders.Shop) -> commerce_builders.Customer:
    return commerce_builders.customer(build)


@pytest.fixture
def operator() -> Client:
    """An operator signed in to the admin."""
    client = Client()
    client.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))
    return client
