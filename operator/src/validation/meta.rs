//! Kubernetes' own syntax rules for what a spec copies verbatim into its children: label and
//! annotation keys and values, and names of other objects (service account, priority class,
//! ingress class, Secret, StorageClass). The API server refuses a child that breaks them with a
//! 422 naming the child's field; checked here, the ContentServer says `InvalidSpec` naming its
//! own field, and nothing is applied. Rules as in apimachinery's `validation.go`. Pure.

use super::SpecError;
use crate::crd::ContentServerSpec;
use std::collections::BTreeMap;

/// apimachinery's `TotalAnnotationSizeLimitB`: keys and values of one object's annotations.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
const MAX_NAME_PART: usize = 63;
const MAX_SUBDOMAIN: usize = 253;

/// Every syntax error in what the spec copies into its children's metadata and references.
pub fn errors(spec: &ContentServerSpec) -> Vec<SpecError> {
    let mut errs = Vec::new();
    let pod = &spec.pod;
    labels(&mut errs, "spec.pod.labels", &pod.labels);
    annotations(&mut errs, "spec.pod.annotations", &pod.annotations);
    // "" is the pod default for these two (Kubernetes checks them only when set).
    name(
        &mut errs,
        "spec.pod.serviceAccountName",
        pod.service_account_name
            .as_deref()
            .filter(|n| !n.is_empty()),
    );
    labels(
        &mut errs,
        "spec.scheduling.nodeSelector",
        &spec.scheduling.node_selector,
    );
    name(
        &mut errs,
        "spec.scheduling.priorityClassName",
        spec.scheduling
            .priority_class_name
            .as_deref()
            .filter(|n| !n.is_empty()),
    );
    annotations(
        &mut errs,
        "spec.service.annotations",
        &spec.service.annotations,
    );
    labels(
        &mut errs,
        "spec.metrics.serviceMonitor.labels",
        &spec.metrics.service_monitor.labels,
    );
    if let Some(expose) = &spec.expose {
        if let Some(r) = &expose.http_route {
            annotations(
                &mut errs,
                "spec.expose.httpRoute.annotations",
                &r.annotations,
            );
        }
        if let Some(i) = &expose.ingress {
            annotations(&mut errs, "spec.expose.ingress.annotations", &i.annotations);
            name(
                &mut errs,
                "spec.expose.ingress.className",
                i.class_name.as_deref(),
            );
            if let Some(tls) = &i.tls {
                name(
                    &mut errs,
                    "spec.expose.ingress.tls.secretName",
                    Some(&tls.secret_name),
                );
            }
        }
    }
    for (i, v) in spec.volumes.iter().enumerate() {
        // "" is a class of its own: no dynamic provisioning (a pre-made PersistentVolume).
        let class = v.source.claim_template.as_ref();
        let class = class.and_then(|c| c.storage_class_name.as_deref());
        if class != Some("") {
            let f = format!("spec.volumes[{i}].source.claimTemplate.storageClassName");
            name(&mut errs, &f, class);
        }
    }
    errs
}

fn labels(errs: &mut Vec<SpecError>, field: &str, map: &BTreeMap<String, String>) {
    for (k, v) in map {
        if let Some(why) = qualified_name(k) {
            errs.push(err(field, format!("key {k:?}: {why}")));
        }
        if let Some(why) = label_value(v) {
            errs.push(err(field, format!("value {v:?} of {k:?}: {why}")));
        }
    }
}

fn annotations(errs: &mut Vec<SpecError>, field: &str, map: &BTreeMap<String, String>) {
    for k in map.keys() {
        // apimachinery's ValidateAnnotations: a qualified name, except that case does not matter.
        if let Some(why) = qualified_name(&k.to_ascii_lowercase()) {
            errs.push(err(field, format!("key {k:?}: {why}")));
        }
    }
    let total: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_ANNOTATIONS_BYTES {
        errs.push(err(
            field,
            format!("{total} bytes of keys and values: Kubernetes allows {MAX_ANNOTATIONS_BYTES}"),
        ));
    }
}

/// The name of another object (a DNS-1123 subdomain), when set.
fn name(errs: &mut Vec<SpecError>, field: &str, value: Option<&str>) {
    if let Some(v) = value {
        if let Some(why) = dns_subdomain(v) {
            errs.push(err(field, format!("{v:?} {why}")));
        }
    }
}

fn err(field: &str, message: String) -> SpecError {
    SpecError {
        field: field.into(),
        message,
    }
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain, the name at most 63
/// characters of `[A-Za-z0-9._-]` beginning and ending with a letter or digit.
fn qualified_name(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("the prefix before '/' must not be empty".into());
        }
        if let Some(why) = dns_subdomain(p) {
            return Some(format!("prefix {p:?} {why}"));
        }
    }
    if name.is_empty() {
        return Some("the name part must not be empty".into());
    }
    if name.len() > MAX_NAME_PART {
        return Some(format!(
            "the name part must be at most {MAX_NAME_PART} characters"
        ));
    }
    if !name_chars(name, |c| c.is_ascii_alphanumeric()) {
        return Some(
            "the name part must be letters, digits, '-', '_' or '.', beginning and ending with a letter or digit (at most one '/' after a DNS prefix)"
                .into(),
        );
    }
    None
}

/// A label value: empty, or at most 63 characters of `[A-Za-z0-9._-]` beginning and ending
/// with a letter or digit.
fn label_value(v: &str) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    if v.len() > MAX_NAME_PART {
        return Some(format!("must be at most {MAX_NAME_PART} characters"));
    }
    if !name_chars(v, |c| c.is_ascii_alphanumeric()) {
        return Some(
            "must be letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
                .into(),
        );
    }
    None
}

/// `[A-Za-z0-9._-]*` with `ends` at both ends.
fn name_chars(s: &str, ends: impl Fn(char) -> bool) -> bool {
    s.starts_with(&ends)
        && s.ends_with(&ends)
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A DNS-1123 label (a namespace's name): at most 63 lower-case letters, digits and '-',
/// beginning and ending with a letter or digit. None when it is one; else why not.
pub fn dns_label(s: &str) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME_PART
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || c == '-');
    (!ok).then(|| {
        format!("must be a DNS label: at most {MAX_NAME_PART} lower-case letters, digits and '-', beginning and ending with a letter or digit")
    })
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated labels of lower-case letters,
/// digits and '-', each beginning and ending with a letter or digit. None when it is one; else
/// why not.
pub fn dns_subdomain(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= MAX_SUBDOMAIN
        && s.split('.').all(|label| {
            let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            label.starts_with(alnum)
                && label.ends_with(alnum)
                && label.chars().all(|c| alnum(c) || c == '-')
        });
    (!ok).then(|| {
        format!("must be a DNS subdomain: at most {MAX_SUBDOMAIN} characters of lower-case letters, digits, '-' and '.', each part beginning and ending with a letter or digit")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_values_and_names_follow_apimachinery() {
        for ok in [
            "app",
            "a.b_c-d",
            "example.com/team",
            "app.kubernetes.io/name",
            "A1",
            &"x".repeat(63),
        ] {
            assert_eq!(qualified_name(ok), None, "{ok}");
        }
        for bad in [
            "",
            "team name",
            "-a",
            "a-",
            "/a",
            "a/",
            "Example.com/x",
            "a/b/c",
            "ex_ample.com/x",
            &"x".repeat(64),
        ] {
            assert!(qualified_name(bad).is_some(), "{bad:?}");
        }
        for ok in ["", "v1", "a.b-c_d", &"v".repeat(63)] {
            assert_eq!(label_value(ok), None, "{ok}");
        }
        for bad in ["a b", "-v", "v.", "é", "a/b", &"v".repeat(64)] {
            assert!(label_value(bad).is_some(), "{bad:?}");
        }
        for ok in ["web", "my-sa", "a.b.c", "0abc", &"a".repeat(253)] {
            assert_eq!(dns_subdomain(ok), None, "{ok}");
        }
        for bad in [
            "",
            "My_SA",
            "a..b",
            ".a",
            "a.",
            "-a",
            "a b",
            &"a".repeat(254),
        ] {
            assert!(dns_subdomain(bad).is_some(), "{bad:?}");
        }
    }
}
