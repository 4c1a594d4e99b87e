"""The caching fields of the ContentServer CRD (spec.origin, volumes[].cache, routes[].cache,
spec.purgeToken) reject what the API server must reject, structurally (types, bounds,
quantities, unknown fields), starting from examples/edge-cache.yaml, which is accepted.

The CEL rules of these fields are tested in test_packaging.py (CEL_CASES), the operator's own
checks (maxSize against the claim) in the operator's tests.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lib import crd_schema

ROOT = Path(__file__).resolve().parent.parent
CRD_FILE = ROOT / "crds" / "contentservers.contentserver.dev.yaml"
EXAMPLE = ROOT / "examples" / "edge-cache.yaml"


def vol(d: dict) -> dict:
    return d["spec"]["volumes"][0]


def route_cache(d: dict) -> dict:
    return d["spec"]["routes"][0]["cache"]


# case -> how it breaks the example
BREAKS = {
    "cache-unknown-field": lambda d: vol(d)["cache"].update(maxsize="900Gi"),
    "cache-max-size-not-a-quantity": lambda d: vol(d)["cache"].update(maxSize="900 gigs"),
    "cache-max-size-a-number": lambda d: vol(d)["cache"].update(maxSize=900),
    "cache-slice-size-not-a-quantity": lambda d: vol(d)["cache"].update(sliceSize="1 MiB"),
    "cache-min-uses-zero": lambda d: vol(d)["cache"].update(minUses=0),
    "cache-min-uses-too-many": lambda d: vol(d)["cache"].update(minUses=16),
    "cache-inactive-zero": lambda d: vol(d)["cache"].update(inactiveSecs=0),
    "origin-unknown-field": lambda d: d["spec"]["origin"].update(timeoutMs=100),
    "origin-no-servers": lambda d: d["spec"]["origin"].update(servers=[]),
    "origin-missing-servers": lambda d: d["spec"]["origin"].pop("servers"),
    "origin-connect-timeout-zero": lambda d: d["spec"]["origin"].update(connectTimeoutMs=0),
    "origin-max-connections-too-many": lambda d: d["spec"]["origin"].update(maxConnections=100000),
    "origin-pass-buffer-too-large": lambda d: d["spec"]["origin"].update(passBufferBytes=67108865),
    "origin-host-empty": lambda d: d["spec"]["origin"].update(host=""),
    "route-cache-status-out-of-range": lambda d: route_cache(d)["valid"][0].update(status=[600]),
    "route-cache-negative-stale": lambda d: route_cache(d).update(staleIfErrorSecs=-1),
    "route-cache-unknown-field": lambda d: route_cache(d).update(staleSecs=5),
    "purge-token-without-key": lambda d: d["spec"]["purgeToken"]["secretKeyRef"].pop("key"),
}


@pytest.fixture(scope="module")
def crd() -> dict:
    (doc,) = [d for d in yaml.safe_load_all(CRD_FILE.read_text()) if d]
    return doc


def example() -> dict:
    (cs,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "ContentServer"]
    return cs


def test_the_example_uses_every_caching_field(crd: dict) -> None:
    """So that each break below changes a field the example really sets."""
    spec = example()["spec"]
    assert crd_schema.errors(crd, example()) == []
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    origin_fields = set(props["origin"]["properties"]) - {"sni"}  # host and sni: one is enough
    assert origin_fields <= set(spec["origin"]), origin_fields - set(spec["origin"])
    cache_fields = set(props["volumes"]["items"]["properties"]["cache"]["properties"])
    assert cache_fields <= set(spec["volumes"][0]["cache"])
    route_fields = set(props["routes"]["items"]["properties"]["cache"]["properties"])
    assert route_fields - {"ignoreOriginHeaders"} <= set(spec["routes"][0]["cache"])


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_broken_caching_field_is_rejected(crd: dict, case: str) -> None:
    bad = copy.deepcopy(example())
    BREAKS[case](bad)
    assert bad != example()
    assert crd_schema.errors(crd, bad) != [], f"{case} was accepted"
