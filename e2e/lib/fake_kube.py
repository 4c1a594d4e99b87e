"""A minimal in-memory Kubernetes API for running the real content-operator without a cluster.

Owns just enough of the API for the operator's controller to reconcile: LIST and WATCH of
ContentServers (the watch re-sends each one as MODIFIED every `touch_every` seconds, as if
someone edited it, so reconciles keep happening), empty LISTs and idle WATCHes of the owned
kinds, server-side apply and merge patches answered with the object (nothing is stored but the
ContentServers' status; applied objects are kept in `applied` for inspection), 404 for GETs and
DELETEs of children and of CRDs other than `crds`, 201 for Events. Writes
to namespaces in `failing_namespaces` answer 500, so those reconciles fail. It does not
validate anything and is not a general fake: it exists so the operator's real metrics move.
"""

import copy
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CS_PATH = "/apis/contentserver.dev/v1alpha1"


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def crd_body(name):
    plural, group = name.split(".", 1)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": plural, "kind": plural.capitalize()[:-1]},
                 "versions": [{"name": "v1", "served": True, "storage": True}]},
    }


class FakeKube:
    def __init__(self, contentservers, failing_namespaces=(), touch_every=1.0, crds=()):
        self.lock = threading.Lock()
        self.crds = set(crds)
        # (namespace, plural, name) -> the last object applied with server-side apply.
        self.applied = {}
        self.rv = 100
        self.objects = {}
        for cs in contentservers:
            cs = copy.deepcopy(cs)
            md = cs.setdefault("metadata", {})
            md.setdefault("namespace", "default")
            md.setdefault("uid", f"uid-{md['namespace']}-{md['name']}")
            md.setdefault("generation", 1)
            md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            md["resourceVersion"] = str(self.next_rv())
            self.objects[(md["namespace"], md["name"])] = cs
        self.failing = set(failing_namespaces)
        self.touch_every = touch_every
        self.stopping = threading.Event()
        self.requests = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.handle(self, "GET")

            def do_PATCH(self):
                fake.handle(self, "PATCH")

            def do_POST(self):
                fake.handle(self, "POST")

            def do_PUT(self):
                fake.handle(self, "PUT")

            def do_DELETE(self):
                fake.handle(self, "DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path):
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                      "namespace": "default"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
        }
        path.write_text(json.dumps(cfg))  # JSON is YAML
        return path

    def stop(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def next_rv(self):
        self.rv += 1
        return self.rv

    # --- HTTP plumbing

    def send_json(self, h, code, body):
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def read_body(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def chunk(self, h, obj):
        data = (json.dumps(obj) + "\n").encode()
        h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        h.wfile.flush()

    # --- The API

    def handle(self, h, method):
        u = urllib.parse.urlparse(h.path)
        q = urllib.parse.parse_qs(u.query)
        path = u.path.rstrip("/")
        with self.lock:
            self.requests.append((method, h.path))
        body = self.read_body(h)  # always consume it: DELETE carries DeleteOptions
        parts = path.split("/")
        ns = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
        is_cs = path.startswith(CS_PATH) and "contentservers" in parts
        if method == "GET" and q.get("watch") == ["true"]:
            return self.watch(h, is_cs)
        if method == "GET" and is_cs and parts[-1] == "contentservers":
            return self.list_contentservers(h, ns)
        if method == "GET" and self.is_collection(parts):
            return self.send_json(h, 200, {"kind": "List", "apiVersion": "v1",
                                           "metadata": {"resourceVersion": str(self.rv)},
                                           "items": []})
        if ns in self.failing and method in ("PATCH", "POST", "PUT", "DELETE"):
            return self.send_json(h, 500, status_body(500, "InternalError", "injected failure"))
        if method == "PATCH" and is_cs and parts[-1] == "status":
            return self.patch_status(h, ns, parts[-2], body)
        if method == "GET" and "customresourcedefinitions" in parts and parts[-1] in self.crds:
            return self.send_json(h, 200, crd_body(parts[-1]))
        if method == "PATCH":
            obj = body if isinstance(body, dict) else {}
            with self.lock:
                self.applied[(ns, parts[-2], parts[-1])] = copy.deepcopy(obj)
            md = obj.setdefault("metadata", {})
            md.setdefault("name", parts[-1])
            if ns:
                md.setdefault("namespace", ns)
            md["uid"] = f"uid-{ns}-{parts[-1]}-{parts[-2]}"
            md["resourceVersion"] = str(self.next_rv())
            md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            return self.send_json(h, 200, obj)
        if method == "POST":
            return self.send_json(h, 201, body or {})
        # GET of a single child or CRD, DELETE: nothing exists.
        return self.send_json(h, 404, status_body(404, "NotFound", f"{path} not found"))

    @staticmethod
    def is_collection(parts):
        # .../<resource> (cluster or namespaced), not .../<resource>/<name>
        if "namespaces" in parts:
            i = parts.index("namespaces")
            return len(parts) == i + 3
        return parts[-1] in ("configmaps", "services", "deployments", "statefulsets",
                             "poddisruptionbudgets", "contentservers")

    def list_contentservers(self, h, ns):
        with self.lock:
            items = [copy.deepcopy(o) for (n, _), o in self.objects.items()
                     if ns is None or n == ns]
            rv = str(self.rv)
        self.send_json(h, 200, {"kind": "ContentServerList",
                                "apiVersion": "contentserver.dev/v1alpha1",
                                "metadata": {"resourceVersion": rv}, "items": items})

    def patch_status(self, h, ns, name, body):
        with self.lock:
            obj = self.objects.get((ns, name))
            if obj is None:
                return self.send_json(h, 404, status_body(404, "NotFound", name))
            if isinstance(body, dict) and "status" in body:
                obj["status"] = body["status"]
            obj["metadata"]["resourceVersion"] = str(self.next_rv())
            out = copy.deepcopy(obj)
        self.send_json(h, 200, out)

    def watch(self, h, is_cs):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        deadline = time.monotonic() + 60
        try:
            while not self.stopping.is_set() and time.monotonic() < deadline:
                self.stopping.wait(self.touch_every)
                if not is_cs or self.stopping.is_set():
                    continue
                with self.lock:
                    events = []
                    for obj in self.objects.values():
                        obj["metadata"]["resourceVersion"] = str(self.next_rv())
                        events.append({"type": "MODIFIED", "object": copy.deepcopy(obj)})
                for ev in events:
                    self.chunk(h, ev)
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away
