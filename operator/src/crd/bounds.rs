//! Integer bounds for the whole schema: a schemars transform that gives every integer field the
//! `minimum`/`maximum` its Rust type holds (from the `format` schemars and k8s-openapi write:
//! `int32`, `uint32`, `uint16`, ...), keeping a tighter bound a field sets itself.
//!
//! Why: Kubernetes stores every integer as an int64 and does not enforce `format`, so without
//! bounds the apiserver accepts `replicas: 3000000000`, which the operator cannot decode: that
//! ContentServer would not be reconciled at all (`watch.rs` reports it and goes on with the
//! others). It is applied on the
//! spec and status types (`#[schemars(transform = ...)]`), whose schemas hold every nested type
//! inline (kube generates the CRD with `inline_subschemas`), k8s-openapi types included; a test
//! walks the generated CRD and checks each integer. `int64` needs no bound (it is the
//! apiserver's own integer type); `uint64` gets `minimum: 0` from schemars.
//!
//! API shape only.

use schemars::transform::transform_subschemas;
use schemars::Schema;
use serde_json::Value;

/// The range of an integer `format`, when narrower than the apiserver's int64.
pub fn format_range(format: &str) -> Option<(i64, i64)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        _ => return None,
    })
}

fn is_integer(obj: &serde_json::Map<String, Value>) -> bool {
    match obj.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
        _ => false,
    }
}

/// Add the type's bounds to every integer schema in `schema` (recursively).
pub fn integer_bounds(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        let range = obj
            .get("format")
            .and_then(Value::as_str)
            .and_then(format_range);
        if let (true, Some((lo, hi))) = (is_integer(obj), range) {
            let own_min = obj.get("minimum").and_then(Value::as_f64);
            let own_max = obj.get("maximum").and_then(Value::as_f64);
            if own_min.is_none_or(|m| m < lo as f64) {
                obj.insert("minimum".into(), lo.into());
            }
            if own_max.is_none_or(|m| m > hi as f64) {
                obj.insert("maximum".into(), hi.into());
            }
        }
    }
    transform_subschemas(&mut integer_bounds, schema);
}
