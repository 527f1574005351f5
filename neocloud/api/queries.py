"""List and object queries that refuse a parameter they do not read.

django-filter reads the filters it knows and drops the rest: ``?statuss=pending`` listed every
workload, as if unfiltered. As with request bodies (``neocloud.api.bodies``), a misspelt
parameter is ``400 unknown_field`` naming it. A view that reads a parameter of its own beside
its filters, its page and its ordering names it in ``query_parameters``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.filters import OrderingFilter
from rest_framework.request import Request
from rest_framework.settings import api_settings

from neocloud.api.bodies import query_names, refuse_unknown


class KnownParameters(DjangoFilterBackend):  # type: ignore[misc]
    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> Any:
        refuse_unknown(request.query_params, self.known(queryset, view))
        return super().filter_queryset(request, queryset, view)

    def known(self, queryset: QuerySet[Any], view: Any) -> set[str]:
        """The view's filters, its page's and ordering's parameters, its own, and ``format``."""
        known = query_names(*getattr(view, "query_parameters", ()))
        filterset = self.get_filterset_class(view, queryset)
        if filterset is not None:
            known |= set(filterset.base_filters)
        paginator = getattr(view, "paginator", None)
        for name in ("cursor_query_param", "page_size_query_param", "page_query_param"):
            if parameter := getattr(paginator, name, None):
                known.add(parameter)
        if any(issubclass(backend, OrderingFilter) for backend in view.filter_backends):
            known.add(api_settings.ORDERING_PARAM)
        return {name for name in known if name}
