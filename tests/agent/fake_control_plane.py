"""A small control plane for the agent's tests: the four node endpoints of PROTOCOL §1 to §4,
in a thread, recording what it got; it can refuse the token, answer 503 or go away."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ENDED = ("exited", "start_failed")


class FakeControlPlane:
    def __init__(self, node_id: str, token: str = "node-token") -> None:  # noqa: S107  # noqa: S107
        self.node_id = node_id
        self.token = token
        self.failing = False  # answer 503 to everything
        self.accepting_work = True
        self.cond = threading.Condition()
        self.assignments: dict[str, dict[str, Any]] = {}  # what the test placed here
        self.held: set[str] = set()  # assignments whose allocation is still held
        self.heartbeats: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []  # every report sent, resends included
        self.applied: list[dict[str, Any]] = []  # reports applied once, in order
        self.last_seq: dict[str, int] = {}
        self.logs: dict[str, bytearray] = {}
        self.logs_at_end: dict[str, int] = {}  # output length when `exited` was applied
        self.dropped: dict[str, int] = {}
        self.statuses: list[int] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None

    # -- the server ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Go away: connections are refused until ``start`` again (same port)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- what the test does ----------------------------------------------------------------

    def assign(self, assignment_id: str, **fields: Any) -> None:
        assignment = {
            "id": assignment_id,
            "workload_id": f"w-{assignment_id}",
            "allocation_id": f"a-{assignment_id}",
            "workload_name": f"job-{assignment_id}",
            "rank": 0,
            "node_count": 1,
            "argv": ["true"],
            "image": "",
            "working_dir": "",
            "env": {},
            "gpus": [],
            "ports": [],
            "cpu_milli": 1000,
            "memory_mib": 1024,
            "stop_grace_s": 1,
        } | fields
        with self.cond:
            self.assignments[assignment_id] = assignment
            self.held.add(assignment_id)
            self.cond.notify_all()

    def release(self, assignment_id: str) -> None:
        """The workload let its allocation go: listed as `stop` while it runs."""
        with self.cond:
            self.held.discard(assignment_id)
            self.cond.notify_all()

    def wait_for(self, what: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting ({timeout} s)")
            time.sleep(0.05)

    def reports(self, assignment_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        with self.cond:
            return [
                r
                for r in self.applied
                if r["assignment_id"] == assignment_id and kind in (None, r["kind"])
            ]

    def ended(self, assignment_id: str) -> bool:
        return any(r["kind"] in ENDED for r in self.reports(assignment_id))

    def output(self, assignment_id: str) -> bytes:
        with self.cond:
            return bytes(self.logs.get(assignment_id, b""))

    # -- what the endpoints do ------------------------------------------------------------

    def listing(self) -> list[dict[str, Any]]:
        listed = []
        for ident, assignment in self.assignments.items():
            kinds = {r["kind"] for r in self.applied if r["assignment_id"] == ident}
            if ident in self.held:
                desired = "run"
            elif "started" in kinds and not kinds.intersection(ENDED):
                desired = "stop"
            else:
                continue
            listed.append(
                assignment | {"desired": desired, "last_seq": self.last_seq.get(ident, 0)}
            )
        return listed

    def version(self) -> str:
        # The SSH keys of a run are part of its desired state (issue 32), as the real one's.
        pairs = sorted((a["id"], a["desired"], a.get("ssh")) for a in self.listing())
        return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]

    def get_assignments(self, query: dict[str, list[str]]) -> dict[str, Any]:
        wait = float(query.get("wait", ["0"])[0])
        since = query.get("since", [None])[0]
        deadline = time.monotonic() + wait
        with self.cond:
            while since == self.version() and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
            return {"version": self.version(), "assignments": self.listing()}

    def post_reports(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            reports = body["reports"]
            self.received.extend(reports)
            if any(r["assignment_id"] not in self.assignments for r in reports):
                return 400, {
                    "error": {
                        "code": "unknown_assignment",
                        "message": "not yours",
                        "fields": {"reports": ["unknown assignment"]},
                    }
                }
            applied, duplicates = [], []
            for report in reports:
                key = [report["assignment_id"], report["seq"]]
                if report["seq"] <= self.last_seq.get(report["assignment_id"], 0):
                    duplicates.append(key)
                    continue
                self.last_seq[report["assignment_id"]] = report["seq"]
                self.applied.append(report)
                applied.append(key)
                if report["kind"] == "exited":
                    self.logs_at_end[report["assignment_id"]] = len(
                        self.logs.get(report["assignment_id"], b"")
                    )
            self.cond.notify_all()
            return 200, {"applied": applied, "duplicates": duplicates}

    def post_logs(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            touched = set()
            for chunk in body["chunks"]:
                ident, offset = chunk["assignment_id"], chunk["offset"]
                data = base64.b64decode(chunk["data"])
                stored = self.logs.setdefault(ident, bytearray())
                touched.add(ident)
                if offset <= len(stored) < offset + len(data):
                    stored.extend(data[len(stored) - offset :])
            for loss in body["dropped"]:
                ident = loss["assignment_id"]
                touched.add(ident)
                self.dropped[ident] = max(self.dropped.get(ident, 0), loss["bytes"])
            return {"next_offset": {i: len(self.logs.get(i, b"")) for i in touched}}


def _handler(plane: FakeControlPlane) -> type[BaseHTTPRequestHandler]:
    prefix = f"/api/v1/nodes/{plane.node_id}/"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            plane.statuses.append(status)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                return  # the agent went away (a test killed it)

        def _refusal(self) -> bool:
            if self.headers.get("Authorization") != f"Node {plane.token}":
                self._answer(401, {"error": {"code": "not_authenticated", "message": "token"}})
                return True
            if plane.failing:
                self._answer(503, {"error": {"code": "unavailable", "message": "down"}})
                return True
            return False

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if self._refusal():
                return
            if url.path != prefix + "assignments":
                self._answer(404, {"error": {"code": "not_found", "message": url.path}})
                return
            self._answer(200, plane.get_assignments(parse_qs(url.query)))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self._refusal():
                return
            endpoint = urlsplit(self.path).path.removeprefix(prefix)
            if endpoint == "heartbeat":
                with plane.cond:
                    plane.heartbeats.append(body)
                self._answer(
                    200,
                    {
                        "state": "ready",
                        "received_at": "now",
                        "mismatch": "",
                        "accepting_work": plane.accepting_work,
                    },
                )
            elif endpoint == "reports":
                self._answer(*plane.post_reports(body))
            elif endpoint == "logs":
                self._answer(200, plane.post_logs(body))
            else:
                self._answer(404, {"error": {"code": "not_found", "message": endpoint}})

    return Handler
