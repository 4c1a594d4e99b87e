"""The objects the real content-operator applies for given ContentServers.

Owns running the `content-operator` binary (stack.Operator) against the in-memory API
(fake_kube.FakeKube, with every optional CRD the operator may use installed), each ContentServer
in a namespace of its own, waiting until the operator has written each one's status for its
current generation (children are applied before the status), and returning what it applied by
server-side apply, per ContentServer. It asserts nothing about the objects.
"""

from __future__ import annotations

import copy
from pathlib import Path

from lib import fake_kube, stack

# CRDs installed in the fake API, so that the operator renders every optional child kind.
OPTIONAL_CRDS = ["servicemonitors.monitoring.coreos.com", "httproutes.gateway.networking.k8s.io",
                 "gateways.gateway.networking.k8s.io"]


def reconciled(kube: fake_kube.FakeKube, ns: str, name: str) -> bool:
    cs = kube.get("contentserver.dev/v1alpha1", "ContentServer", name, ns) or {}
    status = cs.get("status") or {}
    return status.get("observedGeneration") == cs.get("metadata", {}).get("generation")


def children(tmp: Path, servers: dict[str, dict], timeout: float = 60) -> dict[str, list[dict]]:
    """{key: [applied objects]} for {key: ContentServer}; each key becomes the namespace of its
    ContentServer (so keys must be DNS labels)."""
    stack.build_bins()
    placed = {}
    for key, cs in servers.items():
        cs = copy.deepcopy(cs)
        cs["metadata"]["namespace"] = key
        placed[key] = cs
    kube = fake_kube.FakeKube(list(placed.values()), crds=OPTIONAL_CRDS)
    op = None
    try:
        op = stack.Operator(tmp, kube.kubeconfig(tmp / "kubeconfig"))
        for key, cs in placed.items():
            stack.wait_until(f"status of {key}/{cs['metadata']['name']}",
                             lambda: reconciled(kube, key, cs["metadata"]["name"]),
                             timeout=timeout, proc=op.proc.p, log=op.proc.log)
        with kube.lock:
            applied = copy.deepcopy(kube.applied)
    finally:
        if op is not None:
            op.stop()
        kube.stop()
    return {key: [obj for (ns, _, _), obj in sorted(applied.items(), key=lambda kv: kv[0][1:])
                  if ns == key] for key in placed}
