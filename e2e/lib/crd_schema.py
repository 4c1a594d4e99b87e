"""Turns a CRD's structural openAPIV3Schema into a JSON Schema (draft 2020-12) for `jsonschema`.

Owns the mapping of Kubernetes' OpenAPI dialect onto JSON Schema, modelling what the API server
enforces with strict field validation (kubectl's default):

- `x-kubernetes-int-or-string: true` -> integer or string;
- `nullable: true` -> null is accepted too; a null where the schema is not nullable is pruned
  before validation and defaulting, as the API server prunes it (`errors` only);
- an object with `properties` rejects unknown fields unless `x-kubernetes-preserve-unknown-fields`
  (or `x-kubernetes-embedded-resource`) says otherwise;
- other `x-kubernetes-*` extensions are dropped.

CEL rules (`x-kubernetes-validations`) are evaluated separately, as the API server does: after
structural defaulting (`default`), on each node with `self` bound to the node's value (rules on
`oldSelf`, i.e. transition rules, only apply to updates and are skipped), declared property names
escaped as the API server escapes them (`namespace` is `__namespace__` in a rule, `a.b` is
`a__dot__b`; see `escape_field_name`). The CEL runtime is the `common-expression-language` package
plus the Kubernetes list extension `sum()`.

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


_VALIDATORS: dict[tuple[int, str], tuple[dict[str, Any], jsonschema.Draft202012Validator]] = {}


def validator(crd: dict[str, Any], version: str) -> jsonschema.Draft202012Validator:
    """A checked validator for one version (cached per CRD object; do not mutate the CRD)."""
    key = (id(crd), version)
    if key not in _VALIDATORS:
        schema = version_schema(crd, version)
        jsonschema.Draft202012Validator.check_schema(schema)
        _VALIDATORS[key] = (crd, jsonschema.Draft202012Validator(schema))
    return _VALIDATORS[key][1]


def raw_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


def errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """Schema and then CEL errors of a custom resource, as `path: message` strings (empty when
    valid). CEL rules run only on an object that passed the structural schema, as in the API
    server where a type error stops validation before CEL."""
    version = obj["apiVersion"].split("/", 1)[1]
    obj = prune_nulls(raw_schema(crd, version), obj)
    v = validator(crd, version)
    out = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(v.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if out:
        return out
    schema = raw_schema(crd, version)
    return cel_errors(schema, apply_defaults(schema, obj))


def prune_nulls(schema: dict[str, Any], value: Any) -> Any:
    """The API server's pruning of nulls: an object's property whose value is null and whose
    schema is not `nullable` is removed (then defaulted, if it has a default), recursively."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for k in list(value):
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            if sub is None:
                continue
            if value[k] is None and not sub.get("nullable", False):
                del value[k]
            else:
                value[k] = prune_nulls(sub, value[k])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [prune_nulls(schema["items"], x) for x in value]
    return value


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: missing properties with a `default` get it, recursively."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for k, sub in props.items():
            if k not in value and "default" in sub:
                value[k] = copy.deepcopy(sub["default"])
            if k in value:
                value[k] = apply_defaults(sub, value[k])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for k in value:
                if k not in props:
                    value[k] = apply_defaults(extra, value[k])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [apply_defaults(schema["items"], x) for x in value]
    return value


# CEL reserved words the API server escapes as `__word__` when they name a property.
_CEL_RESERVED = {"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
                 "function", "if", "import", "let", "loop", "package", "namespace", "return",
                 "var", "void", "while"}


def escape_field_name(name: str) -> str | None:
    """A declared property's name as a CEL rule spells it (the API server's `cel.Escape`): a
    reserved word becomes `__word__`; `__`, `.`, `-` and `/` become `__underscores__`, `__dot__`,
    `__dash__` and `__slash__`. None when the name cannot be reached from CEL (a leading digit,
    another character outside `[a-zA-Z0-9_]`)."""
    if not name or name[0].isdigit():
        return None
    if name in _CEL_RESERVED:
        return f"__{name}__"
    out, i = [], 0
    while i < len(name):
        if name.startswith("__", i):
            out.append("__underscores__")
            i += 2
            continue
        c = name[i]
        if c in "./-":
            out.append({".": "__dot__", "-": "__dash__", "/": "__slash__"}[c])
        elif c == "_" or (c.isascii() and c.isalnum()):
            out.append(c)
        else:
            return None
        i += 1
    return "".join(out)


def cel_value(schema: dict[str, Any], value: Any) -> Any:
    """`value` as a rule sees it: the keys of declared properties escaped (recursively); the keys
    of a map (`additionalProperties`) or of unknown fields are kept as they are."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for k, v in value.items():
            if k in props:
                name = escape_field_name(k)
                if name is not None:
                    out[name] = cel_value(props[k], v)
            else:
                out[k] = cel_value(extra, v) if isinstance(extra, dict) else v
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [cel_value(schema["items"], x) for x in value]
    return value


def cel_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Every failing `x-kubernetes-validations` rule, as `path: message`."""
    import cel  # common-expression-language

    out: list[str] = []
    rules_here = schema.get("x-kubernetes-validations", [])
    seen = cel_value(schema, value) if rules_here else value
    for r in rules_here:
        if "oldSelf" in r["rule"]:
            continue
        ctx = cel.Context({"self": seen}, {"sum": lambda xs: sum(xs)})
        try:
            ok = cel.evaluate(r["rule"], ctx)
        except Exception as e:  # a rule that cannot run is a failure too
            out.append(f"{path or '<root>'}: {r['rule']}: {e}")
            continue
        if ok is not True:
            out.append(f"{path or '<root>'}{r.get('fieldPath', '')}: {r.get('message', r['rule'])}")
    if isinstance(value, dict):
        for k, sub in (schema.get("properties") or {}).items():
            if k in value and value[k] is not None:
                out += cel_errors(sub, value[k], f"{path}.{k}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, x in enumerate(value):
            out += cel_errors(schema["items"], x, f"{path}[{i}]")
    return out


def rules(schema: dict[str, Any]) -> list[str]:
    """Every CEL rule (`x-kubernetes-validations[].rule`) in an openAPIV3Schema."""
    out = [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
    for sub in (schema.get("properties") or {}).values():
        out += rules(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out += rules(schema[key])
    return out
