"""Turns a CRD's structural openAPIV3Schema into a JSON Schema (draft 2020-12) for `jsonschema`.

Owns the mapping of Kubernetes' OpenAPI dialect onto JSON Schema, modelling what the API server
enforces with strict field validation (kubectl's default):

- `x-kubernetes-int-or-string: true` -> integer or string;
- `nullable: true` -> null is accepted too;
- an object with `properties` rejects unknown fields unless `x-kubernetes-preserve-unknown-fields`
  (or `x-kubernetes-embedded-resource`) says otherwise;
- other `x-kubernetes-*` extensions are dropped. CEL rules (`x-kubernetes-validations`) are not
  evaluated here: `rules()` lists them for callers that want to check they exist.

It must not fetch anything or know about a particular CRD.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema


def convert(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema equivalent of one openAPIV3Schema node (recursively)."""
    s = copy.deepcopy(schema)
    preserve = bool(s.pop("x-kubernetes-preserve-unknown-fields", False))
    embedded = bool(s.pop("x-kubernetes-embedded-resource", False))
    int_or_string = bool(s.pop("x-kubernetes-int-or-string", False))
    nullable = bool(s.pop("nullable", False))
    for key in [k for k in s if k.startswith("x-kubernetes-")]:
        del s[key]

    if "properties" in s:
        s["properties"] = {k: convert(v) for k, v in s["properties"].items()}
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = convert(s["additionalProperties"])
    if isinstance(s.get("items"), dict):
        s["items"] = convert(s["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            s[key] = [convert(x) for x in s[key]]
    if "not" in s:
        s["not"] = convert(s["not"])

    if s.get("type") == "object" and "properties" in s and "additionalProperties" not in s:
        if not (preserve or embedded):
            s["additionalProperties"] = False

    if int_or_string:
        s.pop("type", None)
        s = {"anyOf": [{"type": "integer"}, {"type": "string"}], **s}
    if nullable:
        s = {"anyOf": [{"type": "null"}, s]}
    return s


def version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            out = convert(v["schema"]["openAPIV3Schema"])
            # The API server handles these itself; a CRD's root schema need not list them.
            props = out.setdefault("properties", {})
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props.setdefault("metadata", {"type": "object"})
            out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
            return out
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


def validator(crd: dict[str, Any], version: str) -> jsonschema.Draft202012Validator:
    schema = version_schema(crd, version)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """Schema errors of a custom resource, as `path: message` strings (empty when valid)."""
    version = obj["apiVersion"].split("/", 1)[1]
    v = validator(crd, version)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(v.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def rules(schema: dict[str, Any]) -> list[str]:
    """Every CEL rule (`x-kubernetes-validations[].rule`) in an openAPIV3Schema."""
    out = [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
    for sub in (schema.get("properties") or {}).values():
        out += rules(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out += rules(schema[key])
    return out
