//! Tables written as arrays. serde's derived structs also accept a sequence and take its values
//! by field position (`limits = [100, 5]` set `max_connections` and `keepalive_timeout_secs`),
//! so what a configuration means would hang on the order of fields in the source. Checked
//! before deserializing, against the configuration's own JSON schema: where only a table may
//! be, an array is an error naming the field. Owns only that check.

use serde_json::Value as Json;
use toml::de::DeValue;

/// `Err(message naming the field and its line)` when `text` (valid TOML) has an array where
/// the configuration expects a table. TOML syntax errors are left to the parser.
pub fn check(text: &str) -> Result<(), String> {
    let Ok(table) = toml::de::DeTable::parse(text) else {
        return Ok(());
    };
    let schema = schemars::schema_for!(super::Config);
    let root = schema.as_value();
    let span = table.span();
    let value = toml::Spanned::new(span, DeValue::Table(table.into_inner()));
    walk(root, root, &value, "").map_err(|(path, at)| {
        let (line, column) = super::errors::line_column(text, at);
        format!(
            "field {path}: a table is expected, not an array (fields are named, never taken by position), at line {line}, column {column}"
        )
    })
}

/// `Err((field path, byte offset))` of the first array where only a table may be.
fn walk(
    root: &Json,
    schema: &Json,
    value: &toml::Spanned<DeValue<'_>>,
    path: &str,
) -> Result<(), (String, usize)> {
    let alts = alternatives(root, schema);
    match value.get_ref() {
        DeValue::Array(items) => {
            if let Some(types) = types(root, schema) {
                if types.contains(&"object") && !types.contains(&"array") {
                    return Err((path.to_string(), value.span().start));
                }
            }
            if let Some(item) = alts.iter().find_map(|s| s.get("items")) {
                for (i, v) in items.iter().enumerate() {
                    walk(root, item, v, &format!("{path}[{i}]"))?;
                }
            }
        }
        DeValue::Table(t) => {
            for (k, v) in t {
                let k: &str = k.get_ref();
                let sub = alts
                    .iter()
                    .find_map(|s| s.get("properties").and_then(|p| p.get(k)))
                    .or_else(|| {
                        alts.iter()
                            .find_map(|s| s.get("additionalProperties").filter(|a| a.is_object()))
                    });
                if let Some(sub) = sub {
                    let p = if path.is_empty() {
                        k.to_string()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(root, sub, v, &p)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// `schema` with its `$ref`s followed, and the alternatives of an `anyOf`/`oneOf` (an
/// `Option<T>` is T or null).
fn alternatives<'a>(root: &'a Json, schema: &'a Json) -> Vec<&'a Json> {
    let s = resolve(root, schema);
    let mut out = vec![s];
    for key in ["anyOf", "oneOf"] {
        if let Some(list) = s.get(key).and_then(Json::as_array) {
            out.extend(list.iter().map(|a| resolve(root, a)));
        }
    }
    out
}

fn resolve<'a>(root: &'a Json, mut s: &'a Json) -> &'a Json {
    for _ in 0..32 {
        let Some(name) = s
            .get("$ref")
            .and_then(Json::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        else {
            break;
        };
        match root.get("$defs").and_then(|d| d.get(name)) {
            Some(target) => s = target,
            None => break,
        }
    }
    s
}

/// The JSON types `schema` allows, or None when it does not say (then anything goes here).
fn types<'a>(root: &'a Json, schema: &'a Json) -> Option<Vec<&'a str>> {
    let s = resolve(root, schema);
    if let Some(t) = s.get("type") {
        return match t {
            Json::String(one) => Some(vec![one.as_str()]),
            Json::Array(many) => Some(many.iter().filter_map(Json::as_str).collect()),
            _ => None,
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(list) = s.get(key).and_then(Json::as_array) {
            let mut all = Vec::new();
            for a in list {
                all.extend(types(root, a)?);
            }
            return Some(all);
        }
    }
    s.get("properties").map(|_| vec!["object"])
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn tables_written_as_arrays_are_refused_naming_the_field() {
        for (text, field) in [
            ("limits = [100, 5]\n", "field limits:"),
            (
                "listeners = [[\"127.0.0.1\", 8080]]\n",
                "field listeners[0]:",
            ),
            (
                "[http.media_headers]\nm3u8 = [\"no-store\", 5]\n",
                "field http.media_headers.m3u8:",
            ),
            (
                "[http.media_headers]\nts = []\n",
                "field http.media_headers.ts:",
            ),
            (
                "[[volumes]]\nname = \"a\"\npath = \"/a\"\ncache = [\"1G\"]\n",
                "field volumes[0].cache:",
            ),
        ] {
            let err = check(text).expect_err(text);
            assert!(err.starts_with(field), "{text}: {err}");
        }
    }

    #[test]
    fn arrays_where_arrays_belong_pass() {
        let ok = "[http]\nindex = [\"index.html\"]\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n\
                  [[routes]]\nprefix = \"/\"\nsplit = [{ volume = \"a\", percent = 100.0 }]\n";
        assert_eq!(check(ok), Ok(()));
    }
}
