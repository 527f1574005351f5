"""The caller's address, one rule for every use of it: throttles, the sign-in lockout, logs.

Behind ``TRUSTED_PROXY_COUNT`` proxies (the TLS proxy in front of the web processes: 1) the
peer is the last proxy, so the caller is the address the outermost trusted proxy saw: in
``X-Forwarded-For``, counted from the right, since each trusted proxy appends the address it
was reached from and anything further left the caller may have written itself. With none
(the default) the peer is the caller and ``X-Forwarded-For`` is ignored.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    peer = str(request.META.get("REMOTE_ADDR", ""))
    count = int(settings.TRUSTED_PROXY_COUNT)
    if count <= 0:
        return peer
    header = str(request.META.get("HTTP_X_FORWARDED_FOR", ""))
    forwarded = [part.strip() for part in header.split(",") if part.strip()]
    if not forwarded:
        return peer
    chosen = forwarded[-min(count, len(forwarded))]
    try:
        return str(ipaddress.ip_address(chosen))
    except ValueError:
        return peer  # not an address: nothing a trusted proxy wrote
