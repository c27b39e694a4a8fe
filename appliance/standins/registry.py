"""An embedded schema registry on loopback, for the demo, for trying Floe and for tests.

It speaks the part of Confluent's Schema Registry REST API that producers and consumers use
(registering a schema under a subject, looking one up, fetching by id or by subject and
version), keeps everything in memory, and checks no compatibility. Any standard client
(confluent-kafka's serializers, Floe itself) talks to it as to Confluent's, Redpanda's or
Karapace's registry. Given `credentials`, it asks for HTTP basic authentication as theirs do,
and refuses others with 401.
"""

from __future__ import annotations

import base64
import hmac
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema", "schemaType", "references"}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version
        self.served: Counter[str] = Counter()  # GET paths -> times asked (how often clients come back)

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        entry = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                 "references": body.get("references") or []}
        with self.lock:
            ids = self.subjects.setdefault(subject, [])
            for i in ids:
                if self._same(self.schemas[i - 1], entry):
                    return {"id": i}
            same = next((i for i, s in enumerate(self.schemas, 1) if self._same(s, entry)), None)
            if same is None:
                self.schemas.append(entry)
                same = len(self.schemas)
            ids.append(same)
            return {"id": same}

    @staticmethod
    def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return (a["schema"], a["schemaType"], a["references"]) == (b["schema"], b["schemaType"], b["references"])

    def by_id(self, schema_id: int) -> dict[str, Any] | None:
        with self.lock:
            return dict(self.schemas[schema_id - 1]) if 0 < schema_id <= len(self.schemas) else None

    def version(self, subject: str, version: str) -> dict[str, Any] | None:
        with self.lock:
            ids = self.subjects.get(subject)
            if not ids:
                return None
            n = len(ids) if version in ("latest", "-1") else int(version)
            if not 0 < n <= len(ids):
                return None
            return {"subject": subject, "version": n, "id": ids[n - 1], **self.schemas[ids[n - 1] - 1]}

    def lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any] | None:
        entry = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                 "references": body.get("references") or []}
        with self.lock:
            for n, i in enumerate(self.subjects.get(subject, []), 1):
                if self._same(self.schemas[i - 1], entry):
                    return {"subject": subject, "version": n, "id": i, **entry}
        return None


def _not_found(what: str, code: int) -> tuple[int, dict[str, Any]]:
    return 404, {"error_code": code, "message": f"{what} not found"}


class _Handler(BaseHTTPRequestHandler):
    store: _Store
    credentials: str | None = None  # USER:PASSWORD every request must bring (basic auth), if set

    def log_message(self, *args: Any) -> None:  # quiet: requests are not worth a line each
        pass

    def _refused(self) -> bool:
        """Whether the request lacks the credentials asked for (then answered 401, as registries do)."""
        if self.credentials is None:
            return False
        expected = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        if hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected.encode()):
            return False
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._reply(401, {"error_code": 40101, "message": "Unauthorized"})
        return True

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self._refused():
            return
        url = urlparse(self.path)
        with self.store.lock:
            self.store.served[url.path] += 1
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        self._reply(*self._get(parts, query))

    def _get(self, parts: list[str], query: dict[str, list[str]]) -> tuple[int, Any]:
        store = self.store
        if parts == ["subjects"]:
            with store.lock:
                return 200, sorted(store.subjects)
        if parts == ["schemas", "types"]:
            return 200, ["AVRO", "PROTOBUF", "JSON"]
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
            found = store.by_id(int(parts[2]))
            return (200, found) if found else _not_found("Schema", 40403)
        if len(parts) == 4 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit() and parts[3] == "versions":
            with store.lock:
                found = [{"subject": s, "version": n} for s, ids in sorted(store.subjects.items())
                         for n, i in enumerate(ids, 1) if i == int(parts[2])]
            return (200, found) if found else _not_found("Schema", 40403)
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            with store.lock:
                ids = store.subjects.get(parts[1])
            return (200, list(range(1, len(ids) + 1))) if ids else _not_found("Subject", 40401)
        if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
            found = store.version(parts[1], parts[3]) if parts[3].lstrip("-").isdigit() or parts[3] == "latest" \
                else None
            return (200, found) if found else _not_found("Version", 40402)
        return _not_found("Endpoint", 40400)

    def do_POST(self) -> None:  # noqa: N802
        if self._refused():
            return
        parts = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
        try:
            body = self._body()
        except ValueError:
            self._reply(422, {"error_code": 42201, "message": "Invalid JSON"})
            return
        if "schema" not in body:
            self._reply(422, {"error_code": 42201, "message": "Empty schema"})
        elif len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            self._reply(200, self.store.register(parts[1], body))
        elif len(parts) == 2 and parts[0] == "subjects":
            found = self.store.lookup(parts[1], body)
            self._reply(*((200, found) if found else _not_found("Schema", 40403)))
        else:
            self._reply(*_not_found("Endpoint", 40400))


class EmbeddedRegistry:
    """A schema registry served from this process on loopback: `url` is where clients reach it;
    `credentials` (USER:PASSWORD): the basic authentication every request must bring."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, credentials: str | None = None) -> None:
        self._store = _Store()
        self.credentials = credentials
        handler = type("Handler", (_Handler,), {"store": self._store, "credentials": credentials})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="floe-registry", daemon=True)
        self._thread.start()

    def served(self, path: str) -> int:
        """How many times a GET of `path` (e.g. `/schemas/ids/1`) was answered."""
        with self._store.lock:
            return self._store.served[path]

    def client(self):
        """confluent-kafka's client of this registry (for producers' serializers)."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        auth = {"basic.auth.user.info": self.credentials} if self.credentials else {}
        return SchemaRegistryClient({"url": self.url, **auth})

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
