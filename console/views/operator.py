"""Operator pages (staff only, ``console.staff``): the fleet map, a node, every queue, the
orders waiting for approval, the organizations in dunning, and the node and order actions,
each behind a confirm page and done by the same services as the API (so each is an event)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse

from console.forms.operator import ConfirmForm
from console.guard import ConsoleRequest
from console.selectors import operator as selectors
from console.staff import staff_only
from inventory import services as inventory
from inventory.lifecycle import NodeAction
from inventory.models import Node
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from orders import services as orders
from scheduler import services as scheduler

# What each node action does, as its confirm page says it.
NODE_ACTION_MEANS = {
    NodeAction.CORDON: "No new work is placed on it; what runs there stays.",
    NodeAction.UNCORDON: "It takes new work again.",
    NodeAction.DRAIN: "No new work is placed on it; once its work has ended it goes to"
    " maintenance.",
    NodeAction.MAINTENANCE: "End the drain now: the node goes to maintenance.",
    NodeAction.DECOMMISSION: "Retire the node for good; its resources are torn down.",
}


@staff_only
def home(request: ConsoleRequest) -> HttpResponse:
    return redirect("console:operator-fleet")


@staff_only
def fleet(request: ConsoleRequest) -> HttpResponse:
    return render(request, "console/operator/fleet.html", {"clusters": selectors.fleet_map()})


@staff_only
def node(request: ConsoleRequest, pk: str) -> HttpResponse:
    return render(request, "console/operator/node.html", {"page": selectors.node_page(pk)})


@staff_only
def queues(request: ConsoleRequest) -> HttpResponse:
    return render(request, "console/operator/queues.html", {"found": selectors.all_queues()})


@staff_only
def approvals(request: ConsoleRequest) -> HttpResponse:
    waiting, threshold = selectors.orders_waiting()
    context = {"orders": waiting, "threshold": threshold}
    return render(request, "console/operator/orders.html", context)


@staff_only
def dunning(request: ConsoleRequest) -> HttpResponse:
    context = {"rows": selectors.organizations_in_dunning()}
    return render(request, "console/operator/dunning.html", context)


def _confirm(
    request: ConsoleRequest,
    *,
    context: dict[str, Any],
    act: Callable[[str], Any],
    done: str,
    back: str,
) -> HttpResponse:
    """GET: the confirm page. POST (its form): ``act(reason)`` through the service, then back
    to ``back`` with ``done``; a refusal re-renders the page with the service's message and
    status, nothing written."""
    form = ConfirmForm(request.POST if request.method == "POST" else None)
    status, error = 200, ""
    if request.method == "POST":
        if form.is_valid():
            try:
                act(form.cleaned_data["reason"])
            except ApplicationError as refused:
                status, error = refused.http_status, refused.message
            else:
                messages.success(request, done)
                return redirect(back)
        else:
            status = 400
    context = {**context, "form": form, "error": error}
    return render(request, "console/operator/confirm.html", context, status=status)


@staff_only
def node_action(request: ConsoleRequest, pk: str, action: str) -> HttpResponse:
    """Cordon, uncordon, drain, maintenance or decommission, as ``POST
    /api/v1/nodes/{id}/{action}`` does it."""
    target, chosen = selectors.node_for_action(pk, action)
    actor = request.console.actor
    back = reverse("console:operator-node", args=[target.pk])

    def act(reason: str) -> Any:
        if chosen is NodeAction.DECOMMISSION:
            return atomic_with_retry(
                inventory.node_decommission, actor=actor, node=target, reason=reason
            )
        return atomic_with_retry(
            inventory.node_transition, actor=actor, node=target, action=chosen, reason=reason
        )

    context = {
        "title": f"{chosen.value.capitalize()} {target.name}",
        "means": NODE_ACTION_MEANS[chosen],
        "button": chosen.value.capitalize(),
        "cancel": back,
        "previewable": chosen is NodeAction.DRAIN,
    }
    if chosen is NodeAction.DRAIN and request.method == "GET" and request.GET.get("preview"):
        context["preview"] = _drain_preview(request, target)
    done = f"Node {target.name}: {chosen.value} done."
    return _confirm(request, context=context, act=act, done=done, back=back)


def _drain_preview(request: ConsoleRequest, target: Node) -> selectors.WhatIfShown:
    """What draining ``target`` would do to its cluster's waiting work (``cluster_what_if``,
    as ``POST /api/v1/clusters/{id}/what-if`` runs it), nothing written."""
    answer = atomic_with_retry(
        scheduler.cluster_what_if,
        actor=request.console.actor,
        cluster=target.cluster,
        drain=[target.pk],
    )
    return selectors.what_if_shown(answer)


@staff_only
def order_action(request: ConsoleRequest, pk: str, action: str) -> HttpResponse:
    """Approve (and fulfil) or reject an order waiting for approval, as the admin does."""
    order = selectors.order_waiting(pk)
    actor = request.console.actor
    back = reverse("console:operator-orders")
    if action == "approve":

        def act(reason: str) -> Any:
            return atomic_with_retry(orders.order_approve, actor=actor, order=order)

        means = "It is checked again (catalog, standing, quotas) and fulfilled."
    elif action == "reject":

        def act(reason: str) -> Any:
            why = reason or f"rejected by operator {request.console.user.email}"
            return atomic_with_retry(orders.order_reject, actor=actor, order=order, reason=why)

        means = "The customer sees it rejected, with the reason."
    else:
        raise Http404
    what = f"{order.offering} x{order.quantity} for {order.organization.name}"
    context = {
        "title": f"{action.capitalize()} the order {what}",
        "means": means,
        "button": action.capitalize(),
        "cancel": back,
        "with_reason": action == "reject",
    }
    done = f"Order {what}: {action}d."
    return _confirm(request, context=context, act=act, done=done, back=back)


urlpatterns: list[URLPattern] = [
    path("operator/", home, name="operator"),
    path("operator/fleet", fleet, name="operator-fleet"),
    path("operator/nodes/<str:pk>", node, name="operator-node"),
    path("operator/nodes/<str:pk>/<str:action>", node_action, name="operator-node-action"),
    path("operator/queues", queues, name="operator-queues"),
    path("operator/orders", approvals, name="operator-orders"),
    path("operator/orders/<str:pk>/<str:action>", order_action, name="operator-order-action"),
    path("operator/dunning", dunning, name="operator-dunning"),
]
