"""A minimal in-memory Kubernetes API server on 127.0.0.1, enough for `helm install` to run.

Owns: discovery documents (/version, /api, /apis and one resource list per group version) for
the kinds the chart renders, and a dict of objects by URL path that POST/PUT/PATCH/GET/DELETE
act on; every object created is recorded in order. It lets the packaging tests drive Helm's
real install action (Helm's Go code through helm_native) and read back exactly the manifests
Helm would send to a cluster. It must not pretend to validate or reconcile anything.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# group/version -> [(resource, kind, namespaced)]
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("namespaces", "Namespace", False),
        ("secrets", "Secret", True),
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("pods", "Pod", True),
        ("persistentvolumeclaims", "PersistentVolumeClaim", True),
        ("events", "Event", True),
    ],
    "apps/v1": [("deployments", "Deployment", True), ("statefulsets", "StatefulSet", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "coordination.k8s.io/v1": [("leases", "Lease", True)],
    "autoscaling/v2": [("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)],
    "apiextensions.k8s.io/v1": [("customresourcedefinitions", "CustomResourceDefinition", False)],
    "monitoring.coreos.com/v1": [
        ("servicemonitors", "ServiceMonitor", True),
        ("prometheusrules", "PrometheusRule", True),
    ],
}

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _resource_list(gv: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": [
            {"name": r, "singularName": k.lower(), "namespaced": ns, "kind": k, "verbs": VERBS}
            for r, k, ns in RESOURCES[gv]
        ],
    }


def _group_list() -> dict[str, Any]:
    groups = []
    for gv in RESOURCES:
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        ver = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [ver], "preferredVersion": ver})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class FakeApiServer:
    """Start with `with FakeApiServer() as api:`; `api.kubeconfig` is a kubeconfig file path."""

    def __init__(self, workdir: Path) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._workdir = workdir
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.kubeconfig = workdir / "kubeconfig"

    def __enter__(self) -> "FakeApiServer":
        self._thread.start()
        port = self._server.server_address[1]
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "fake", "user": {"token": "fake"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def manifests(self) -> list[dict[str, Any]]:
        """Objects created, minus Helm's own release-record Secrets."""
        return [
            o
            for o in self.created
            if not (o.get("kind") == "Secret" and (o.get("metadata", {}).get("labels") or {}).get("owner") == "helm")
        ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(
                    code,
                    {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": message, "reason": reason, "code": code},
                )

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b"{}"
                if "protobuf" in (self.headers.get("Content-Type") or ""):
                    # Helm's release record (a Secret written by the typed client in protobuf).
                    # Only its name matters here; the manifests themselves arrive as JSON.
                    m = re.search(rb"sh\.helm\.release\.v1\.[a-z0-9.-]+\.v[0-9]+", raw)
                    name = m.group(0).decode() if m else "unknown"
                    return {"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": name, "labels": {"owner": "helm"}}}
                return json.loads(raw or b"{}")

            def _parse(self) -> tuple[str, str | None, str, str | None]:
                """path -> (group/version, namespace, resource, name)."""
                parts = [p for p in urlsplit(self.path).path.split("/") if p]
                if parts[0] == "api":
                    gv, rest = parts[1], parts[2:]
                else:
                    gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
                ns = None
                if len(rest) >= 3 and rest[0] == "namespaces":
                    ns, rest = rest[1], rest[2:]
                return gv, ns, rest[0], (rest[1] if len(rest) > 1 else None)

            def _kind(self, gv: str, resource: str) -> str:
                for r, k, _ in RESOURCES.get(gv, []):
                    if r == resource:
                        return k
                return "Unknown"

            def do_GET(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path.rstrip("/")
                api.requests.append(("GET", self.path))
                if path == "/version":
                    return self._send(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0",
                                            "platform": "linux/amd64"})
                if path == "/api":
                    return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": [
                                                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
                if path == "/apis":
                    return self._send(200, _group_list())
                if path == "/api/v1":
                    return self._send(200, _resource_list("v1"))
                parts = path.split("/")
                if len(parts) == 4 and parts[1] == "apis" and f"{parts[2]}/{parts[3]}" in RESOURCES:
                    return self._send(200, _resource_list(f"{parts[2]}/{parts[3]}"))
                if not (path.startswith("/api/") or path.startswith("/apis/")):
                    return self._status(404, "NotFound", f"{path} not found")
                gv, ns, resource, name = self._parse()
                with api._lock:
                    if name is None:
                        prefix = path + "/"
                        items = [o for p, o in api.objects.items() if p.startswith(prefix)
                                 and "/" not in p[len(prefix):]]
                        return self._send(200, {"kind": self._kind(gv, resource) + "List",
                                                "apiVersion": gv, "metadata": {"resourceVersion": "1"},
                                                "items": items})
                    obj = api.objects.get(path)
                if obj is None:
                    return self._status(404, "NotFound", f'{resource} "{name}" not found')
                return self._send(200, obj)

            def do_POST(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path.rstrip("/")
                api.requests.append(("POST", self.path))
                obj = self._body()
                meta = obj.setdefault("metadata", {})
                name = meta.get("name")
                if not name:
                    return self._status(422, "Invalid", "metadata.name is required")
                gv, ns, resource, _ = self._parse()
                key = f"{path}/{name}"
                with api._lock:
                    if key in api.objects:
                        return self._status(409, "AlreadyExists", f'{resource} "{name}" already exists')
                    api.created.append(json.loads(json.dumps(obj)))
                    meta.update(uid=str(uuid.uuid4()), resourceVersion="1",
                                creationTimestamp=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
                    if ns:
                        meta["namespace"] = ns
                    api.objects[key] = obj
                return self._send(201, obj)

            def do_PUT(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path.rstrip("/")
                api.requests.append(("PUT", self.path))
                obj = self._body()
                with api._lock:
                    if path not in api.objects:
                        return self._status(404, "NotFound", f"{path} not found")
                    old = api.objects[path]["metadata"]
                    obj.setdefault("metadata", {}).update(
                        uid=old.get("uid"), resourceVersion=str(int(old.get("resourceVersion", "1")) + 1))
                    api.objects[path] = obj
                return self._send(200, obj)

            def do_PATCH(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path.rstrip("/")
                api.requests.append(("PATCH", self.path))
                self._body()
                with api._lock:
                    obj = api.objects.get(path)
                if obj is None:
                    return self._status(404, "NotFound", f"{path} not found")
                return self._send(200, obj)

            def do_DELETE(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path.rstrip("/")
                api.requests.append(("DELETE", self.path))
                with api._lock:
                    obj = api.objects.pop(path, None)
                if obj is None:
                    return self._status(404, "NotFound", f"{path} not found")
                return self._send(200, obj)

        return Handler
