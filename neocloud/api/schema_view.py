"""``/api/schema/`` made once (apart from neocloud.api.schema, which DRF's settings import:
a view here would import them back)."""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response


class SchemaView(SpectacularAPIView):
    """``/api/schema/``: the same document for every caller (served public), changing only
    with the code, so it is generated once per process and version, not per request (each
    generation took 0.2-0.5 s of CPU, for anyone who asked)."""

    _made: ClassVar[dict[str | None, Any]] = {}

    def _get_schema_response(self, request: Request) -> Response:
        if not self.serve_public:  # then it depends on who asks
            return super()._get_schema_response(request)  # type: ignore[no-untyped-call,no-any-return]
        version = self.api_version or request.version or self._get_version_parameter(request)  # type: ignore[no-untyped-call]
        if version not in self._made:
            generator = self.generator_class(
                urlconf=self.urlconf, api_version=version, patterns=self.patterns
            )
            self._made[version] = generator.get_schema(request=request, public=True)  # type: ignore[no-untyped-call]
        filename = self._get_filename(request, version)  # type: ignore[no-untyped-call]
        return Response(
            data=self._made[version],
            headers={"Content-Disposition": f'inline; filename="{filename}"'},
        )
