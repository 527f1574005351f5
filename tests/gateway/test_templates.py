"""The web templates of the catalog (Jupyter Lab, a plain HTTP service): a submission
against one runs its program and names its web port."""

from __future__ import annotations

import pytest

from catalog.templates import JUPYTER_PORT, web_templates_define
from scheduler.models import Workload
from tests.builders import Builder, client_with_key, run
from tests.builders import commerce as commerce


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("offering", "program"),
    [("jupyter-lab", "start-notebook.py"), ("http-service", "python3")],
    ids=["jupyter-lab", "http-service"],
)
def test_a_web_template_runs_its_program_on_its_web_port(
    build: Builder, offering: str, program: str
) -> None:
    commerce.shop()
    defined = run(
        web_templates_define,
        gpu_model="h100",
        region=commerce.REGION,
        price_per_gpu_hour_minor=100,
        currency="USD",
    )
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    project = build.project(organization)
    template = next(o for o in defined if o.slug == offering)

    response = client_with_key(build.key(organization, owner)[1]).post(
        "/api/v1/workloads",
        {
            "project": str(project.pk),
            "name": "lab",
            "offering": offering,
            "region": commerce.REGION,
            "http_ports": template.ports,
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    row = Workload.objects.get(pk=response.json()["id"])
    assert (row.kind, row.command[0], row.offering) == ("service", program, offering)
    assert row.ports == row.http_ports == template.ports
    assert JUPYTER_PORT in next(o for o in defined if o.slug == "jupyter-lab").ports
