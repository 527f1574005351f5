"""The control plane over HTTP (PROTOCOL §1 to §4), with failures sorted by what to do next.

- Unauthorized (401, or no token to send): start nothing new, retry every few seconds.
- Unreachable (refused, timed out, 5xx, 429, an answer that is not JSON): retry with backoff.
- Rejected (any other 4xx): this request will never succeed as it is; drop it.

The token file is read before every request, so a rotated token is picked up without a
restart.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from agent import VERSION


class ControlPlaneError(Exception):
    pass


class Unauthorized(ControlPlaneError):
    pass


class Unreachable(ControlPlaneError):
    pass


class Rejected(ControlPlaneError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code


def _error_of(body: bytes) -> tuple[str, str]:
    """The stable code and message of the API's one error shape (``{"error": {...}}``)."""
    try:
        error = json.loads(body).get("error", {})
        return str(error.get("code", "")), str(error.get("message", ""))
    except (ValueError, AttributeError):
        return "", body[:200].decode(errors="replace")


class Client:
    def __init__(self, *, url: str, node_id: str, token_file: Path, timeout_s: float = 15.0):
        self._base = f"{url.rstrip('/')}/api/v1/nodes/{urllib.parse.quote(node_id, safe='')}"
        self._token_file = token_file
        self._timeout_s = timeout_s

    def _token(self) -> str:
        try:
            token = self._token_file.read_text().strip()
        except OSError as error:
            raise Unauthorized(f"cannot read the token file {self._token_file}: {error}") from None
        if not token:
            raise Unauthorized(f"the token file {self._token_file} is empty")
        return token

    def _call(
        self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked in config
            f"{self._base}/{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Node {self._token()}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"neocloud-agent/{VERSION}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self._timeout_s) as answer:  # noqa: S310
                data = answer.read()
        except urllib.error.HTTPError as error:
            code, message = _error_of(error.read())
            if error.code == 401:
                raise Unauthorized(f"HTTP 401: {message or 'token rejected'}") from None
            if error.code >= 500 or error.code == 429:
                raise Unreachable(f"HTTP {error.code}: {message}") from None
            raise Rejected(error.code, code, message) from None
        except (OSError, http.client.HTTPException) as error:  # URLError, refused, timeouts
            raise Unreachable(f"{type(error).__name__}: {error}") from None
        try:
            answer_body = json.loads(data)
        except ValueError:
            raise Unreachable("the control plane answered something that is not JSON") from None
        if not isinstance(answer_body, dict):
            raise Unreachable("the control plane answered JSON that is not an object")
        return answer_body

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "heartbeat", body)

    def assignments(self, *, wait_s: int, since: str | None) -> dict[str, Any]:
        query = {"wait": str(wait_s)} | ({"since": since} if since is not None else {})
        return self._call(
            "GET",
            f"assignments?{urllib.parse.urlencode(query)}",
            timeout_s=wait_s + self._timeout_s,
        )

    def reports(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        return self._call("POST", "reports", {"reports": reports})

    def logs(self, chunks: list[dict[str, Any]], dropped: list[dict[str, Any]]) -> dict[str, Any]:
        return self._call("POST", "logs", {"chunks": chunks, "dropped": dropped})
