"""Catalog templates for web work (issue 32): offerings whose defaults run a Jupyter Lab or a
plain HTTP service on a web port. The demo defines them (``demo_setup``); an operator may
load the same from a catalog file. A submission against one names its web port itself
(``http_ports``): offerings carry ``ports``, not which of them are web ports.

Jupyter Lab is an ``inference`` offering (a service: runs until stopped) until the ``dev``
workload kind exists."""

from __future__ import annotations

from typing import Any

from catalog import services
from catalog.models import Offering
from tenants.access import Actor

JUPYTER_PORT = 8888
HTTP_PORT = 30080  # inside an agent's default --port-range, so a process run may listen on it

WEB_TEMPLATES: tuple[dict[str, Any], ...] = (
    {
        "slug": "jupyter-lab",
        "name": "Jupyter Lab on one GPU",
        "description": "Open it at its URL: submit with http_ports [8888].",
        "kind": "inference",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-12-02",
        "command": [
            "start-notebook.py",
            "--ServerApp.ip=0.0.0.0",
            f"--ServerApp.port={JUPYTER_PORT}",
            "--ServerApp.token=",  # the gateway authorizes every request
            "--ServerApp.allow_remote_access=true",
        ],
        "ports": [JUPYTER_PORT],
    },
    {
        "slug": "http-service",
        "name": "A plain HTTP service",
        "description": f"Python's http.server on port {HTTP_PORT}: submit with http_ports.",
        "kind": "inference",
        "command": ["python3", "-m", "http.server", str(HTTP_PORT)],
        "ports": [HTTP_PORT],
    },
)


def web_templates_define(
    *, actor: Actor, gpu_model: str, region: str, price_per_gpu_hour_minor: int, currency: str
) -> list[Offering]:
    """Define (or leave as they are) the web templates on ``gpu_model``, priced on demand in
    ``region``."""
    defined = []
    for template in WEB_TEMPLATES:
        offering = services.offering_define(actor=actor, gpu_models=[gpu_model], **template)
        services.price_plan_set(
            actor=actor,
            offering=offering,
            region=region,
            plan="on_demand",
            price_per_gpu_hour_minor=price_per_gpu_hour_minor,
            currency=currency,
        )
        defined.append(offering)
    return defined
