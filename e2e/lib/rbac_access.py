"""What Kubernetes API access the operator needs, read two ways from operator/src.

Owns (1) parsing the "API access" table of operator/src/controller.rs's module doc, and
(2) inferring access from the code itself: the `Api<K>` types each function uses, resolved to
(group, resource) from the `k8s_openapi` imports, the `#[kube(group = ...)]` of the CRD and the
`GroupVersionKind::gvk(...)` of dynamic objects, and the client calls made on them (`get_opt`,
`patch`, `Patch::Apply`, `patch_status`, `delete`, `Controller::new`/`.owns`, `Recorder`, ...),
including through small generic helpers (`fn apply<K>(api: &Api<K>, ...)`, also when one helper
passes its `api` on to another).
Access is a set of (api group, resource, verb) triples. It must not edit anything.
"""

from __future__ import annotations

import re
from pathlib import Path

Triple = tuple[str, str, str]

# k8s_openapi::api::<module> -> API group.
K8S_OPENAPI_GROUPS = {
    "core": "", "apps": "apps", "batch": "batch", "policy": "policy", "autoscaling": "autoscaling",
    "coordination": "coordination.k8s.io", "networking": "networking.k8s.io",
    "rbac": "rbac.authorization.k8s.io", "events": "events.k8s.io", "discovery": "discovery.k8s.io",
    "storage": "storage.k8s.io", "scheduling": "scheduling.k8s.io", "node": "node.k8s.io",
    "admissionregistration": "admissionregistration.k8s.io",
    "certificates": "certificates.k8s.io",
}

# client method -> verbs (on the object's resource, or on its status subresource).
METHOD_VERBS = {
    "get": {"get"}, "get_opt": {"get"}, "get_metadata": {"get"}, "get_metadata_opt": {"get"},
    "list": {"list"}, "list_metadata": {"list"}, "watch": {"watch"},
    "create": {"create"}, "replace": {"update"}, "patch": {"patch"},
    "delete": {"delete"}, "delete_collection": {"deletecollection"},
}
STATUS_METHOD_VERBS = {"get_status": {"get"}, "patch_status": {"patch"}, "replace_status": {"update"}}


def plural(kind: str) -> str:
    k = kind.lower()
    if k.endswith("y"):
        return k[:-1] + "ies"
    if k.endswith("s"):
        return k + "es"
    return k + "s"


def parse_table(controller_rs: Path) -> tuple[set[Triple], dict[tuple[str, str], str]]:
    """The module-doc table: triples, and the `why` text of each (group, resource)."""
    triples: set[Triple] = set()
    why: dict[tuple[str, str], str] = {}
    for line in controller_rs.read_text().splitlines():
        m = re.match(r"^//!\s*\|(.+)\|\s*$", line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(1).split("|")]
        if len(cells) < 3 or set(cells[0]) <= set("-: ") or cells[0].lower().startswith("api group"):
            continue
        group = cells[0].strip("`")
        if group.startswith('""') or group.lower() in ("core", '"" (core)'):
            group = ""
        resource = cells[1].strip("`")
        verbs = {v.strip().strip("`") for v in cells[2].split(",") if v.strip()}
        for v in verbs:
            triples.add((group, resource, v))
        why[(group, resource)] = cells[3] if len(cells) > 3 else ""
    return triples, why


def _strip_tests(text: str) -> str:
    i = text.find("#[cfg(test)]")
    return text if i < 0 else text[:i]


def _functions(text: str) -> list[str]:
    """Top-level and impl-level function bodies (and the code between them), split at `fn`."""
    parts = re.split(r"(?m)^(?=\s{0,4}(?:pub(?:\([a-z]+\))? )?(?:async )?fn )", text)
    return [p for p in parts if p.strip()]


def kind_map(src: Path) -> dict[str, tuple[str, str]]:
    """Rust type name -> (group, resource) for every kind the operator can name."""
    kinds: dict[str, tuple[str, str]] = {}
    for f in src.rglob("*.rs"):
        text = f.read_text()
        for mod, names in re.findall(r"k8s_openapi::api::(\w+)::\w+::\{?([\w, \n]+)\}?", text):
            group = K8S_OPENAPI_GROUPS.get(mod, f"{mod}.k8s.io")
            for n in re.findall(r"[A-Z]\w*", names):
                kinds[n] = (group, plural(n))
        if re.search(r"apiextensions::v1::\{?[^;]*CustomResourceDefinition", text):
            kinds["CustomResourceDefinition"] = ("apiextensions.k8s.io", "customresourcedefinitions")
        m = re.search(r'#\[kube\(\s*group\s*=\s*"([^"]+)"[^)]*?kind\s*=\s*"(\w+)"', text, re.S)
        if m:
            kinds[m.group(2)] = (m.group(1), plural(m.group(2)))
        m = re.search(r'GroupVersionKind::gvk\(\s*"([^"]*)",\s*"[^"]*",\s*"(\w+)"\s*\)(?:,\s*"(\w+)")?', text)
        if m:
            kinds["DynamicObject"] = (m.group(1), m.group(3) or plural(m.group(2)))
    return kinds


def code_access(src: Path) -> set[Triple]:
    """Triples the operator's code needs, inferred from its client calls."""
    kinds = kind_map(src)
    files = {f: _strip_tests(f.read_text()) for f in sorted(src.rglob("*.rs"))}
    out: set[Triple] = set()

    def add(kind: str, verbs: set[str], status: bool = False) -> None:
        if kind not in kinds:
            raise AssertionError(f"operator uses Api<{kind}> but its API group is unknown")
        group, resource = kinds[kind]
        for v in verbs:
            out.add((group, resource + ("/status" if status else ""), v))

    # Generic helpers: fn NAME<K>(api: &Api<K>, ...) -> verbs of the calls made on `api`.
    helpers: dict[str, set[str]] = {}
    helper_bodies: dict[str, tuple[str, str]] = {}
    for text in files.values():
        for fn in _functions(text):
            m = re.match(r"\s*(?:pub(?:\([a-z]+\))? )?(?:async )?fn (\w+)<\w+>\(\s*(\w+):\s*&Api<\w+>", fn)
            if m:
                helpers[m.group(1)] = _verbs_on(fn, m.group(2))[0]
                helper_bodies[m.group(1)] = (fn, m.group(2))
    # A helper passing its `api` on to another helper needs that one's verbs too.
    changed = True
    while changed:
        changed = False
        for name, (fn, param) in helper_bodies.items():
            for other, verbs in helpers.items():
                if other != name and re.search(rf"\b{other}\(\s*&?{param}\b", fn) and not verbs <= helpers[name]:
                    helpers[name] |= verbs
                    changed = True

    for f, text in files.items():
        # An untyped Api built from a typed kind's resource (`ApiResource::erase::<K>`) is K's.
        erased = re.findall(r"ApiResource::erase::<\s*(\w+)\s*>", text)

        def typed(kind: str) -> str:
            return erased[0] if kind == "DynamicObject" and erased else kind

        # Watched kinds: everything controller wiring names is listed and watched.
        if re.search(r"Controller::(?:new|for_stream)\(|\.owns\(|watcher\(", text):
            # (`Api<PartialObjectMeta<K>>`: K's metadata, listed and watched as K.)
            for kind in re.findall(r"Api<\s*(?:PartialObjectMeta<\s*)?(\w+)\s*>", text):
                if not _type_param(kind):
                    add(typed(kind), {"list", "watch"})
        if "Recorder::new(" in text:
            out.update({("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch")})
        for fn in _functions(text):
            # Variables (let bindings, parameters, struct fields) of type Api<K>.
            for var, kind in re.findall(r"\b(\w+)\s*:\s*&?Api<\s*(\w+)\s*>", fn):
                if _type_param(kind):
                    continue
                verbs, status_verbs = _verbs_on(fn, var)
                add(typed(kind), verbs)
                add(typed(kind), status_verbs, status=True)
            # Helper calls on typed variables bound in this function.
            for helper, verbs in helpers.items():
                for var in re.findall(rf"\b{helper}\(\s*&(\w+)", fn):
                    kind = _var_kind(fn, var) or _var_kind(text, var)
                    if not kind:
                        raise AssertionError(f"{f.name}: cannot tell the Api<K> of `{var}` passed to {helper}()")
                    add(kind, verbs)
        # Struct fields used through `self.FIELD.method(`.
        for field, kind in re.findall(r"\b(\w+)\s*:\s*Api<\s*(\w+)\s*>\s*,", text):
            if not _type_param(kind):
                verbs, status_verbs = _verbs_on(text, f"self.{field}")
                add(kind, verbs)
                add(kind, status_verbs, status=True)
    # Every kind the code builds an Api for must have been resolved to some access.
    resources = {(g, r.split("/")[0]) for g, r, _ in out}
    for text in files.values():
        for kind in re.findall(r"Api(?:::)?<\s*([A-Z]\w+)\s*>", text):
            if kinds.get(kind) not in resources:
                raise AssertionError(f"Api<{kind}> is used but no call on it was recognised")
    return out


def _type_param(name: str) -> bool:
    """A generic parameter such as `K` (one capital letter), not a concrete kind."""
    return len(name) == 1 or not name[0].isupper()


def _var_kind(text: str, var: str) -> str | None:
    m = re.search(rf"\b{re.escape(var)}\s*:\s*&?Api<\s*(\w+)\s*>", text)
    return m.group(1) if m else None


def _verbs_on(text: str, var: str) -> tuple[set[str], set[str]]:
    """Verbs of the client calls made on `var` in `text` (object, status subresource)."""
    verbs: set[str] = set()
    status: set[str] = set()
    for method, args in re.findall(rf"\b{re.escape(var)}\s*\.\s*(\w+)\(((?:[^()]|\([^()]*(?:\([^()]*\))?[^()]*\))*)\)", text):
        if method in METHOD_VERBS:
            verbs |= METHOD_VERBS[method]
            if method == "patch" and "Patch::Apply" in args:
                verbs.add("create")  # server-side apply creates missing objects
        elif method in STATUS_METHOD_VERBS:
            status |= STATUS_METHOD_VERBS[method]
    return verbs, status


def chart_access(rules_file: dict) -> dict[str, set[Triple]]:
    """files/rbac-rules.yaml -> scope -> triples."""
    out: dict[str, set[Triple]] = {}
    for scope, rules in rules_file.items():
        triples: set[Triple] = set()
        for rule in rules or []:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        triples.add((g, r, v))
        out[scope] = triples
    return out
