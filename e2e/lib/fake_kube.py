"""The one in-memory Kubernetes API of the e2e tests, on 127.0.0.1 (plain HTTP, any token).

Owns a store of objects keyed by their URL path and the few API behaviours the tests' real
clients need: Helm's install action (through helm_native) and the real content-operator.

- discovery (/version, /api, /apis, one resource list per group version) of the built-in kinds
  in `RESOURCES` plus the groups of every CustomResourceDefinition in the store;
- GET of an object or a collection (namespaced or across namespaces; equality label selectors),
  POST (create; `generateName`; 409 when it exists), PUT (replace), DELETE (404 when missing),
  PATCH: server-side apply creates or replaces the object (each applied body is kept in
  `applied` by (namespace, resource, name)), merge patches merge into it, and either on
  `.../status` only changes the status;
- WATCH: every `touch_every` seconds each stored object of a `touch` resource (ContentServers by
  default) is sent again as MODIFIED, as if someone edited it, so reconciles keep happening;
  other watches stay open and idle;
- requests for a resource that is neither built in nor defined by a stored CRD answer 404 (an
  optional CRD that is not installed);
- writes to a namespace in `failing_namespaces` answer 500 (reconciles there fail);
- a protobuf body (the typed client's Secret that is Helm's release record) is stored as a
  Secret carrying only its name and Helm's `owner`/`name` labels.

It records every request (`requests`) and every created object (`created`, in order). It must
not validate, default or reconcile anything: no schemas, no owners, no garbage collection.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# group/version -> [(resource, kind, namespaced)] of the built-in kinds.
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
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True),
                             ("ingresses", "Ingress", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "coordination.k8s.io/v1": [("leases", "Lease", True)],
    "events.k8s.io/v1": [("events", "Event", True)],
    "autoscaling/v2": [("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)],
    "apiextensions.k8s.io/v1": [("customresourcedefinitions", "CustomResourceDefinition", False)],
}

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NOW = "2026-01-01T00:00:00Z"


# CRD name -> (kind, version) of the custom resources the platform meets.
KNOWN_CRDS = {
    "contentservers.contentserver.dev": ("ContentServer", "v1alpha1"),
    "servicemonitors.monitoring.coreos.com": ("ServiceMonitor", "v1"),
    "prometheusrules.monitoring.coreos.com": ("PrometheusRule", "v1"),
    "httproutes.gateway.networking.k8s.io": ("HTTPRoute", "v1"),
    "gateways.gateway.networking.k8s.io": ("Gateway", "v1"),
    "scaledobjects.keda.sh": ("ScaledObject", "v1alpha1"),
}


def crd(name: str) -> dict:
    """A minimal CustomResourceDefinition `plural.group` of `KNOWN_CRDS` (enough for discovery
    and for a client that checks that the CRD exists)."""
    plural, group = name.split(".", 1)
    kind, version = KNOWN_CRDS[name]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
                 "versions": [{"name": version, "served": True, "storage": True}]},
        "status": {"acceptedNames": {"plural": plural, "kind": kind}},
    }


def status_body(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also used for strategic merge patches: close enough here)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def selector_matches(selector: str, labels: dict) -> bool:
    """Equality-based label selectors (`a=b,c!=d,e`); set-based terms are not understood and
    match everything."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", term) and term not in labels:
            return False
    return True


class Route:
    """One request path: /api/v1/... or /apis/GROUP/VERSION/... split into its parts."""

    def __init__(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "api":
            self.gv, rest = (parts[1] if len(parts) > 1 else ""), parts[2:]
        else:
            self.gv = "/".join(parts[1:3])
            rest = parts[3:]
        self.namespace = None
        if len(rest) > 2 and rest[0] == "namespaces":
            self.namespace, rest = rest[1], rest[2:]
        self.resource = rest[0] if rest else ""
        self.name = rest[1] if len(rest) > 1 else None
        self.subresource = rest[2] if len(rest) > 2 else None
        base = "/api/v1" if self.gv == "v1" else f"/apis/{self.gv}"
        self.collection = base + (f"/namespaces/{self.namespace}" if self.namespace else "") + \
            f"/{self.resource}"

    def key(self, name: str | None = None) -> str:
        return f"{self.collection}/{name or self.name}"

    def in_collection(self, key: str) -> bool:
        """Is the object stored at `key` a member of this collection (all namespaces when the
        route has none)?"""
        if self.namespace is not None:
            head, _, tail = key.rpartition("/")
            return head == self.collection
        base = "/api/v1" if self.gv == "v1" else f"/apis/{self.gv}"
        m = re.fullmatch(re.escape(base) + r"(?:/namespaces/[^/]+)?/" + re.escape(self.resource)
                         + r"/[^/]+", key)
        return m is not None


class FakeKube:
    """`with FakeKube(objects, crds=[...]) as kube:` (or call `stop()`); `kube.kubeconfig(path)`
    writes a kubeconfig naming it. The ContentServer CRD is always installed; `crds` names more
    (from `KNOWN_CRDS`)."""

    def __init__(self, objects=(), failing_namespaces=(), touch_every=1.0,
                 touch=("contentservers",), crds=()) -> None:
        self.lock = threading.Lock()
        self.rv = 100
        self.objects: dict[str, dict] = {}
        self.applied: dict[tuple[str | None, str, str], dict] = {}
        self.created: list[dict] = []
        self.requests: list[tuple[str, str]] = []
        self.failing = set(failing_namespaces)
        self.touch_every = touch_every
        self.touch = set(touch)
        self.stopping = threading.Event()
        for name in ["contentservers.contentserver.dev", *crds]:
            self.put(crd(name))
        for obj in objects:
            self.put(obj)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> "FakeKube":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path) -> Path:
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                      "namespace": "default"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
        }
        path.write_text(json.dumps(cfg))  # JSON is YAML
        return path

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- the store

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def resource_of(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the built-in table or a stored CRD."""
        for r, k, ns in RESOURCES.get(api_version, []):
            if k == kind:
                return r, ns
        for c in self.crds():
            if c["spec"]["group"] == api_version.split("/")[0] and c["spec"]["names"]["kind"] == kind:
                return c["spec"]["names"]["plural"], c["spec"]["scope"] == "Namespaced"
        raise KeyError(f"no resource for {api_version} {kind}")

    def put(self, obj: dict) -> dict:
        """Store an object as if created (namespace `default` when namespaced and unset)."""
        obj = copy.deepcopy(obj)
        plural, namespaced = self.resource_of(obj["apiVersion"], obj["kind"])
        md = obj.setdefault("metadata", {})
        if namespaced:
            md.setdefault("namespace", "default")
        route = Route(("/api/" if "/" not in obj["apiVersion"] else "/apis/") + obj["apiVersion"]
                      + (f"/namespaces/{md['namespace']}" if namespaced else "") + f"/{plural}")
        with self.lock:
            self._stamp(md, route)
            self.objects[route.key(md["name"])] = obj
        return obj

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        plural, namespaced = self.resource_of(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        ns = f"/namespaces/{namespace}" if namespaced else ""
        with self.lock:
            return copy.deepcopy(self.objects.get(f"{base}{ns}/{plural}/{name}"))

    def crds(self) -> list[dict]:
        return [o for k, o in list(self.objects.items()) if k.startswith(CRD_PATH + "/")]

    def _stamp(self, md: dict, route: Route, old: dict | None = None) -> None:
        if route.namespace:
            md["namespace"] = route.namespace
        old_md = (old or {}).get("metadata", {})
        md["uid"] = old_md.get("uid") or md.get("uid") or str(uuid.uuid4())
        md["creationTimestamp"] = old_md.get("creationTimestamp") or md.get("creationTimestamp") or NOW
        md["generation"] = int(old_md.get("generation", 0)) + 1 if old else md.get("generation", 1)
        md["resourceVersion"] = self.next_rv()

    # --- discovery

    def groups(self) -> dict[str, list[tuple[str, str, bool]]]:
        out = {gv: list(rs) for gv, rs in RESOURCES.items()}
        for c in self.crds():
            s = c["spec"]
            for v in s["versions"]:
                out.setdefault(f"{s['group']}/{v['name']}", []).append(
                    (s["names"]["plural"], s["names"]["kind"], s["scope"] == "Namespaced"))
        return out

    def discovery(self, path: str) -> dict | None:
        groups = self.groups()
        if path == "/version":
            return {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if path == "/apis":
            listed = []
            for gv in groups:
                if "/" in gv:
                    group, version = gv.split("/")
                    ver = {"groupVersion": gv, "version": version}
                    listed.append({"name": group, "versions": [ver], "preferredVersion": ver})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
        if path.startswith("/apis/") and path.count("/") == 2:
            return next((dict(g, kind="APIGroup", apiVersion="v1")
                         for g in self.discovery("/apis")["groups"]
                         if g["name"] == path[len("/apis/"):]), None)
        gv = "v1" if path == "/api/v1" else path[len("/apis/"):] if path.startswith("/apis/") else ""
        if gv in groups:
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                    "resources": [{"name": r, "singularName": k.lower(), "namespaced": ns,
                                   "kind": k, "verbs": VERBS} for r, k, ns in groups[gv]]}
        return None

    # --- the API

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        u = urllib.parse.urlsplit(h.path)
        q = urllib.parse.parse_qs(u.query)
        path = u.path.rstrip("/")
        with self.lock:
            self.requests.append((method, h.path))
        body = self.read_body(h)  # always consume it: DELETE carries DeleteOptions
        if method == "GET" and (doc := self.discovery(path)) is not None:
            return self.send(h, 200, doc)
        if not (path.startswith("/api/") or path.startswith("/apis/")):
            return self.send(h, 404, status_body(404, "NotFound", f"{path} not found"))
        route = Route(path)
        if not any(r == route.resource for r, _, _ in self.groups().get(route.gv, [])):
            # Not served (e.g. the CRD of an optional kind is not installed): 404, as the
            # API server answers.
            return self.send(h, 404, status_body(404, "NotFound",
                                                 "the server could not find the requested resource"))
        if route.namespace in self.failing and method != "GET":
            return self.send(h, 500, status_body(500, "InternalError", "injected failure"))
        if method == "GET" and route.name is None:
            if q.get("watch") == ["true"]:
                return self.watch(h, route, q.get("labelSelector", [""])[0])
            return self.list(h, route, q.get("labelSelector", [""])[0])
        if method == "POST" and route.name is None:
            return self.create(h, route, body)
        if route.name is None:
            return self.send(h, 405, status_body(405, "MethodNotAllowed", f"{method} {path}"))
        code, out = {"GET": self.read, "PUT": self.replace, "PATCH": self.patch,
                     "DELETE": self.delete}[method](route, body, h.headers.get("Content-Type") or "")
        return self.send(h, code, out)

    def read(self, route: Route, body: Any, ctype: str) -> tuple[int, dict]:
        with self.lock:
            obj = self.objects.get(route.key())
        if obj is None:
            return 404, status_body(404, "NotFound", f'{route.resource} "{route.name}" not found')
        return 200, copy.deepcopy(obj)

    def create(self, h: BaseHTTPRequestHandler, route: Route, obj: dict) -> None:
        md = obj.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
        if not md.get("name"):
            return self.send(h, 422, status_body(422, "Invalid", "metadata.name is required"))
        key = route.key(md["name"])
        with self.lock:
            if key in self.objects:
                return self.send(h, 409, status_body(
                    409, "AlreadyExists", f'{route.resource} "{md["name"]}" already exists'))
            self.created.append(copy.deepcopy(obj))
            self._stamp(md, route)
            self.objects[key] = obj
            out = copy.deepcopy(obj)
        return self.send(h, 201, out)

    def replace(self, route: Route, obj: dict, ctype: str) -> tuple[int, dict]:
        with self.lock:
            old = self.objects.get(route.key())
            if old is None:
                return 404, status_body(404, "NotFound", f"{route.key()} not found")
            self._stamp(obj.setdefault("metadata", {}), route, old)
            self.objects[route.key()] = obj
            return 200, copy.deepcopy(obj)

    def patch(self, route: Route, body: Any, ctype: str) -> tuple[int, dict]:
        body = body if isinstance(body, dict) else {}
        apply = "apply-patch" in ctype
        with self.lock:
            old = self.objects.get(route.key())
            if route.subresource == "status":
                if old is None:
                    return 404, status_body(404, "NotFound", f"{route.key()} not found")
                new = copy.deepcopy(old)
                new["status"] = body.get("status") if apply else merge_patch(old.get("status"),
                                                                            body.get("status"))
                new["metadata"]["resourceVersion"] = self.next_rv()
            elif apply:
                self.applied[(route.namespace, route.resource, route.name)] = copy.deepcopy(body)
                new = copy.deepcopy(body)
                new.setdefault("metadata", {}).setdefault("name", route.name)
                if old is not None and "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                self._stamp(new["metadata"], route, old)
            elif old is None:
                return 404, status_body(404, "NotFound", f"{route.key()} not found")
            else:
                new = merge_patch(old, body)
                self._stamp(new.setdefault("metadata", {}), route, old)
            self.objects[route.key()] = new
            return 200, copy.deepcopy(new)

    def delete(self, route: Route, body: Any, ctype: str) -> tuple[int, dict]:
        with self.lock:
            obj = self.objects.pop(route.key(), None)
        if obj is None:
            return 404, status_body(404, "NotFound", f'{route.resource} "{route.name}" not found')
        return 200, obj

    def members(self, route: Route, selector: str) -> list[dict]:
        return [copy.deepcopy(o) for k, o in self.objects.items() if route.in_collection(k)
                and selector_matches(selector, o.get("metadata", {}).get("labels") or {})]

    def list(self, h: BaseHTTPRequestHandler, route: Route, selector: str) -> None:
        with self.lock:
            items, rv = self.members(route, selector), str(self.rv)
        kind = next((k for r, k, _ in self.groups().get(route.gv, []) if r == route.resource),
                    "Unknown")
        self.send(h, 200, {"kind": kind + "List", "apiVersion": route.gv,
                           "metadata": {"resourceVersion": rv}, "items": items})

    def watch(self, h: BaseHTTPRequestHandler, route: Route, selector: str) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        deadline = time.monotonic() + 60
        try:
            while not self.stopping.is_set() and time.monotonic() < deadline:
                self.stopping.wait(self.touch_every)
                if route.resource not in self.touch or self.stopping.is_set():
                    continue
                with self.lock:
                    events = []
                    for k, obj in self.objects.items():
                        if route.in_collection(k) and selector_matches(
                                selector, obj["metadata"].get("labels") or {}):
                            obj["metadata"]["resourceVersion"] = self.next_rv()
                            events.append({"type": "MODIFIED", "object": copy.deepcopy(obj)})
                for ev in events:
                    data = (json.dumps(ev) + "\n").encode()
                    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away

    # --- HTTP plumbing

    @staticmethod
    def send(h: BaseHTTPRequestHandler, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def read_body(h: BaseHTTPRequestHandler) -> Any:
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        if "protobuf" in (h.headers.get("Content-Type") or ""):
            m = re.search(rb"sh\.helm\.release\.v1\.([a-z0-9.-]+)\.v[0-9]+", raw)
            name = m.group(0).decode() if m else "unknown"
            labels = {"owner": "helm", "name": m.group(1).decode() if m else ""}
            return {"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "labels": labels}}
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                fake.handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                fake.handle(self, "POST")

            def do_PUT(self) -> None:  # noqa: N802
                fake.handle(self, "PUT")

            def do_PATCH(self) -> None:  # noqa: N802
                fake.handle(self, "PATCH")

            def do_DELETE(self) -> None:  # noqa: N802
                fake.handle(self, "DELETE")

        return Handler
