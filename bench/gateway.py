"""``bench gateway``: requests/s to a web app through the gateway (a real Caddy asking
NeoCloud's ``/gateway/auth`` under gunicorn about every request, with an endpoint token)
against the same app reached directly, by the same concurrent keep-alive clients.

The app is ``bench/webapp.py`` (the standard library's threading server, one process); the
workload is a service on a simulated node whose endpoint is reported through
``workload_endpoints_set``, as the node agent's report does. Goal: at least 0.8 of direct.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
from django.test import override_settings

from bench.api import _free_port, _server_env, _serving
from bench.e2e import ACTOR, _eager, h100_cluster
from bench.gateway_parts import caddy_started, webapp_started
from bench.registry import peak_rss_mb, scratch_database, suite
from gateway import selectors, services
from inventory import services as inventory
from neocloud.core.transactions import atomic_with_retry
from scheduler import services as scheduler
from scheduler.models import Workload, WorkloadStatus
from scheduler.specs import RestartPolicy, WorkloadKind, WorkloadSpec
from tenants.models import Project
from tenants.services import organization_create, project_create, user_register

CLIENTS = 8
SECONDS = 10.0
PORT = 8888
DOMAIN = "gw.bench"


@suite("gateway")
def gateway(scale: float) -> dict[str, Any]:
    seconds = max(1.0, SECONDS * scale)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is the cost
    with scratch_database(), caddy_started() as admin, webapp_started("bench") as app:
        listen = _free_port()
        server = _free_port()
        gateway_settings = {
            "GATEWAY_DOMAIN": DOMAIN,
            "GATEWAY_SCHEME": "http",
            "GATEWAY_ADMIN_URL": admin,
            "GATEWAY_LISTEN": [f"127.0.0.1:{listen}"],
            "GATEWAY_AUTH_UPSTREAM": f"127.0.0.1:{server}",
        }
        with override_settings(**gateway_settings, SIMULATED_STEP_DELAY_S=0):
            workload, token = _seed(app)
            services.routes_reconcile()
            env = {**_server_env(), **{k: str(v) for k, v in gateway_settings.items()}}
            env["GATEWAY_LISTEN"] = f"127.0.0.1:{listen}"
            host = selectors.endpoint_host(selectors.endpoint_id(workload.pk, PORT))
            with _serving(server, env=env):
                direct = _rate(f"http://127.0.0.1:{app}/", {}, seconds)
                through = _rate(
                    f"http://127.0.0.1:{listen}/",
                    {"Host": host, "Authorization": f"Bearer {token}"},
                    seconds,
                )
    return {
        "clients": CLIENTS,
        "seconds": seconds,
        "direct_requests_per_s": round(direct, 1),
        "gateway_requests_per_s": round(through, 1),
        "ratio": round(through / direct, 3) if direct else None,
        "goal_ratio": 0.8,
        "peak_rss_mb": peak_rss_mb(),
    }


def _seed(app_port: int) -> tuple[Workload, str]:
    """A running service with web port 8888 at the app, and a token for it."""
    with _eager():
        cluster, model = h100_cluster()
        node, _ = atomic_with_retry(
            inventory.node_register,
            actor=ACTOR,
            cluster=cluster,
            name="web-0",
            gpu_model=model,
            cpu_milli=32_000,
            memory_mib=262_144,
            gpus=[inventory.GpuSlot(index=0)],
        )
        atomic_with_retry(inventory.node_provision, actor=ACTOR, node=node)
        owner = atomic_with_retry(user_register, actor=ACTOR, email="owner@bench.example")
        organization = atomic_with_retry(
            organization_create, actor=ACTOR, name="Bench", owner=owner, slug="bench"
        )
        project: Project = atomic_with_retry(
            project_create, actor=ACTOR, organization=organization, name="web"
        )
        spec = WorkloadSpec(
            name="web",
            gpu_models=("h100",),
            kind=WorkloadKind.SERVICE,
            restart_policy=RestartPolicy.ON_FAILURE,
            command=("python3", "webapp.py"),
            ports=(PORT,),
            http_ports=(PORT,),
        )
        workload = atomic_with_retry(
            scheduler.workload_submit, actor=ACTOR, project=project, spec=spec
        )
    workload = Workload.objects.get(pk=workload.pk)
    if workload.status != WorkloadStatus.RUNNING:
        raise RuntimeError(f"the bench's service is {workload.status}, not running")
    endpoint = {"port": PORT, "address": f"127.0.0.1:{app_port}", "node": node.name}
    atomic_with_retry(
        scheduler.workload_endpoints_set, actor=ACTOR, workload=workload, endpoints=[endpoint]
    )
    owner_actor = type(ACTOR)(user=owner)
    _, token = atomic_with_retry(
        services.endpoint_token_create, actor=owner_actor, workload=workload, port=PORT
    )
    return workload, token


def _rate(url: str, headers: dict[str, str], seconds: float) -> float:
    """Requests/s of CLIENTS keep-alive clients asking ``url`` for ``seconds``; a request
    that is not a 200 is not counted."""
    counts = [0] * CLIENTS
    end = time.monotonic() + seconds

    def client(i: int) -> None:
        with httpx.Client(headers=headers, timeout=10) as http:
            while time.monotonic() < end:
                if http.get(url).status_code == 200:
                    counts[i] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)
