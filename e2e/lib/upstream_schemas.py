"""Validation of rendered Kubernetes objects against the real upstream schemas.

Owns choosing the schema for an object and reporting what is wrong with it:

- built-in kinds (apps/v1 Deployment, autoscaling/v2 HorizontalPodAutoscaler, ...): the OpenAPI
  schemas bundled in the PyPI package `kubernetes-validate`, strict (unknown fields are errors,
  as with kubectl's default strict field validation), for the Kubernetes version the operator
  is built for (the `v1_NN` feature of k8s-openapi in operator/Cargo.toml);
- custom kinds (Gateway API, Prometheus Operator): the CRDs as their projects release them, in
  the `schemas/` folder of the shared directory beside the repository (see its README), turned
  into JSON Schema by crd_schema.py (unknown fields are errors there too), their
  `x-kubernetes-validations` CEL rules evaluated, and their `metadata` checked against the
  built-in ObjectMeta schema (the API server does that for every custom resource).

The CRDs' patterns are Go (RE2) regular expressions. The one construct of them Python's `re`
rejects, an inline flag group after `^` (`^(?i)(abort|warn)?$`), is translated by moving the
group to the front (`(?i)^(abort|warn)?$`, the same language); any other pattern Python cannot
compile fails loudly (`UntranslatablePattern`) instead of being skipped.

A kind with no schema raises `NoSchema`: a new kind the operator starts rendering cannot pass
unvalidated. It must not fetch anything, nor hold a copy of any schema.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from referencing import Registry, Resource

from lib import crd_schema

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMAS = ROOT.parent / "shared" / "schemas"
OPERATOR_CARGO = ROOT / "operator" / "Cargo.toml"


class NoSchema(Exception):
    """No upstream schema is known for the object's apiVersion and kind."""


class UntranslatablePattern(Exception):
    """A CRD pattern Python's `re` cannot compile and that has no translation."""


def operator_k8s_version() -> str:
    """"1.33" for `k8s-openapi = { ..., features = ["v1_33", ...] }` in operator/Cargo.toml."""
    text = OPERATOR_CARGO.read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("k8s-openapi"))
    m = re.search(r'"v(\d+)_(\d+)"', line)
    if not m:
        raise ValueError(f"no v1_NN feature on the k8s-openapi line of {OPERATOR_CARGO}: {line}")
    return f"{m.group(1)}.{m.group(2)}"


K8S_VERSION = operator_k8s_version()

# Go regexp syntax -> Python `re` syntax, for the constructs the upstream CRDs use.
_LEADING_FLAGS = re.compile(r"^\^(\(\?[imsU]+\))")


def translate_pattern(pattern: str) -> str:
    """The Python equivalent of an RE2 pattern (unchanged when Python accepts it as is)."""
    try:
        re.compile(pattern)
        return pattern
    except re.error:
        pass
    m = _LEADING_FLAGS.match(pattern)
    if m and "U" not in m.group(1):
        out = m.group(1) + "^" + pattern[m.end():]
        re.compile(out)
        return out
    raise UntranslatablePattern(pattern)


def translate_patterns(schema: Any, translated: set[str]) -> Any:
    """A copy of an openAPIV3Schema with every `pattern` made Python-compatible; the patterns
    that needed it are added to `translated`."""
    if isinstance(schema, list):
        return [translate_patterns(x, translated) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "pattern" and isinstance(v, str):
            out[k] = translate_pattern(v)
            if out[k] != v:
                translated.add(v)
        elif k in ("x-kubernetes-validations", "example", "default", "enum"):
            out[k] = copy.deepcopy(v)
        else:
            out[k] = translate_patterns(v, translated)
    return out


# Patterns translated while loading the CRDs (reported by the tests).
TRANSLATED: set[str] = set()


# libyaml when PyYAML has it: the released CRDs are large (seconds with the pure-Python loader).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=1)
def _released() -> dict[tuple[str, str], tuple[str, dict]]:
    """(group, kind) -> (release folder, CRD with patterns translated) for the CRDs in SCHEMAS."""
    if not SCHEMAS.is_dir():
        raise FileNotFoundError(f"{SCHEMAS} missing: the shared schemas must sit beside the repository")
    out = {}
    for path in sorted(SCHEMAS.glob("*/*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                for v in doc["spec"]["versions"]:
                    v["schema"]["openAPIV3Schema"] = translate_patterns(
                        v["schema"]["openAPIV3Schema"], TRANSLATED)
                out[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = (path.parent.name, doc)
    return out


def upstream_crds() -> dict[tuple[str, str], dict]:
    """(group, kind) -> released CRD (patterns translated) for every CRD under SCHEMAS."""
    return {k: crd for k, (_, crd) in _released().items()}


def crd_release(group: str, kind: str) -> str:
    """Which released set of CRDs under SCHEMAS (e.g. `gateway-api-v1.6.1`) defines a kind."""
    if (group, kind) not in _released():
        raise NoSchema(f"{group} {kind}")
    return _released()[(group, kind)][0]


@functools.lru_cache(maxsize=1)
def _object_meta_validator() -> jsonschema.Draft202012Validator:
    """ObjectMeta of the built-in schemas (strict), with their shared definitions."""
    base = f"kubernetes-json-schema/v{_bundled_version()}-local-strict"
    schema = kubernetes_validate.utils.schema_contents(f"{base}/objectmeta-meta-v1.json", K8S_VERSION)
    defs = kubernetes_validate.utils.schema_contents(f"{base}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _bundled_version() -> str:
    """The bundled schema version kubernetes-validate uses for K8S_VERSION (its x.y.0)."""
    versions = [v for v in kubernetes_validate.utils.all_versions()
                if kubernetes_validate.utils.major_minor(v) == K8S_VERSION]
    if not versions:
        raise NoSchema(f"kubernetes-validate bundles no schemas for Kubernetes {K8S_VERSION}")
    return versions[-1]


def schema_of(obj: dict) -> str:
    """Which schema validates `obj`: `kubernetes-validate <version>` or the CRD release."""
    group = obj["apiVersion"].rpartition("/")[0]
    if (group, obj["kind"]) in _released():
        return crd_release(group, obj["kind"])
    return f"kubernetes-validate {K8S_VERSION}"


def errors(obj: dict) -> list[str]:
    """What the upstream schema says is wrong with `obj`, as `kind/name path: message` (empty
    when valid). Raises NoSchema for a kind no upstream schema describes."""
    where = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    group = obj["apiVersion"].rpartition("/")[0]
    release = _released().get((group, obj["kind"]))
    if release is not None:
        crd = release[1]
        found = crd_schema.errors(crd, obj)
        found += [f"{'.'.join(['metadata', *map(str, e.absolute_path)])}: {e.message}"
                  for e in _object_meta_validator().iter_errors(obj.get("metadata") or {})]
        return [f"{where} {e}" for e in found]
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.utils.SchemaNotFoundError as e:
        raise NoSchema(e.message) from None
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.absolute_path) or "<root>"
        return [f"{where} {path}: {e.message}"]
    return []
