//! The generated CRD: `crds/` is current, the schema is structural, the names/subresources are
//! what `kubectl scale`/HPAs need, and its CEL rules (evaluated locally with kube-cel's CRD
//! validation engine, Kubernetes' CEL extensions included) accept the examples and reject each
//! kind of invalid spec with its message.

mod support;

use content_operator::crd::ContentServer;
use kube::CustomResourceExt;
use serde_json::{json, Value};
use support::*;

fn crd_json() -> Value {
    serde_json::to_value(ContentServer::crd()).expect("CRD as JSON")
}

fn root_schema() -> Value {
    crd_json()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn committed_crd_yaml_is_current() {
    let path = repo_root().join("crds/contentservers.contentserver.dev.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = content_operator::crd_yaml().expect("render CRD");
    assert!(
        committed == generated,
        "{} is stale: regenerate it with `cargo run -p content-operator -- crd > crds/contentservers.contentserver.dev.yaml`",
        path.display()
    );
    // And it parses back as the same object.
    let parsed: Value = serde_yaml_ng::from_str(&committed).expect("CRD YAML parses");
    assert_eq!(parsed, crd_json());
}

#[test]
fn names_subresources_and_printer_columns() {
    let crd = crd_json();
    let spec = &crd["spec"];
    assert_eq!(crd["metadata"]["name"], "contentservers.contentserver.dev");
    assert_eq!(spec["group"], "contentserver.dev");
    assert!(!spec["group"].as_str().unwrap_or("").ends_with("k8s.io"));
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["shortNames"], json!(["csrv"]));
    assert_eq!(spec["names"]["categories"], json!(["content"]));
    let v = &spec["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(v["served"], true);
    assert_eq!(v["storage"], true);
    assert_eq!(v["subresources"]["status"], json!({}));
    assert_eq!(
        v["subresources"]["scale"],
        json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
               "labelSelectorPath": ".status.selector"})
    );
    let cols: Vec<&str> = v["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        cols,
        ["Desired", "Ready", "Volumes", "Status", "Hosts", "URL", "Age"]
    );
    let col = |name: &str| {
        v["additionalPrinterColumns"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == name).cloned())
            .expect("column")
    };
    // The whole list (kubectl prints `[a.example b.example]`): with `[*]` the API server's
    // table converter keeps the first result only, hiding every other name.
    assert_eq!(col("Hosts")["jsonPath"], ".status.hostnames");
    assert_eq!(
        (
            col("URL")["jsonPath"].clone(),
            col("URL")["priority"].clone()
        ),
        (json!(".status.url"), json!(1)),
        "URL only in -o wide"
    );
    // Every column and scale path points at a field the schema defines.
    let schema = root_schema();
    let mut paths: Vec<String> = v["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["jsonPath"].as_str().expect("path").to_string())
        .filter(|p| !p.starts_with(".metadata"))
        .collect();
    paths.extend(
        [
            "specReplicasPath",
            "statusReplicasPath",
            "labelSelectorPath",
        ]
        .iter()
        .map(|k| {
            v["subresources"]["scale"][k]
                .as_str()
                .expect("path")
                .to_string()
        }),
    );
    for p in paths {
        let mut node = &schema;
        for seg in p.trim_start_matches('.').split('.') {
            let (field, each) = match seg.strip_suffix("[*]") {
                Some(f) => (f, true),
                None => (seg, false),
            };
            node = &node["properties"][field];
            assert!(!node.is_null(), "{p}: no such field in the schema");
            if each {
                assert_eq!(node["type"], "array", "{p}: [*] on a non-array");
                node = &node["items"];
            }
        }
    }
    // A column prints a value of its own type (a string column may show a list of strings:
    // the API server prints the whole list; `[*]` would show its first element only).
    for c in v["additionalPrinterColumns"].as_array().expect("columns") {
        let p = c["jsonPath"].as_str().expect("path");
        if p.starts_with(".metadata") {
            continue;
        }
        let mut node = &schema;
        for seg in p.trim_start_matches('.').split('.') {
            match seg.strip_suffix("[*]") {
                Some(f) => node = &node["properties"][f]["items"],
                None => node = &node["properties"][seg],
            }
        }
        assert!(
            !p.contains("[*]"),
            "column {}: {p} shows one element",
            c["name"]
        );
        let list_of_strings = node["type"] == "array" && node["items"]["type"] == "string";
        assert!(
            node["type"] == c["type"] || (c["type"] == "string" && list_of_strings),
            "column {}: {p}",
            c["name"]
        );
    }
    // Scale paths must be integer / string fields.
    assert_eq!(
        schema["properties"]["spec"]["properties"]["replicas"]["type"],
        "integer"
    );
    assert_eq!(
        schema["properties"]["status"]["properties"]["replicas"]["type"],
        "integer"
    );
    assert_eq!(
        schema["properties"]["status"]["properties"]["selector"]["type"],
        "string"
    );
}

/// The structural-schema rules of apiextensions.k8s.io/v1, checked on every node.
fn check_structural(node: &Value, path: &str, in_junctor: bool, errors: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        errors.push(format!("{path}: schema is not an object"));
        return;
    };
    for forbidden in ["$ref", "definitions", "$defs", "$schema", "const"] {
        if obj.contains_key(forbidden) {
            errors.push(format!("{path}: {forbidden} is not allowed"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if in_junctor {
        for k in [
            "type",
            "default",
            "description",
            "additionalProperties",
            "nullable",
        ] {
            if obj.contains_key(k) {
                errors.push(format!("{path}: {k} inside allOf/anyOf/oneOf/not"));
            }
        }
    } else if !obj.contains_key("type") && !int_or_string && !preserve {
        errors.push(format!("{path}: no type"));
    }
    if let Some(t) = obj.get("type") {
        if !t.is_string() {
            errors.push(format!("{path}: type must be one string, got {t}"));
        }
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        errors.push(format!(
            "{path}: properties and additionalProperties together"
        ));
    }
    if obj.get("type") == Some(&json!("array")) && !obj.get("items").is_some_and(Value::is_object) {
        errors.push(format!("{path}: array without a single items schema"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            check_structural(v, &format!("{path}.{k}"), in_junctor, errors);
        }
    }
    if let Some(items) = obj.get("items") {
        check_structural(items, &format!("{path}[]"), in_junctor, errors);
    }
    if let Some(ap) = obj.get("additionalProperties").filter(|v| v.is_object()) {
        check_structural(ap, &format!("{path}{{}}"), in_junctor, errors);
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = obj.get(j).and_then(Value::as_array) {
            for (i, s) in list.iter().enumerate() {
                check_structural(s, &format!("{path}.{j}[{i}]"), true, errors);
            }
        }
    }
    if let Some(not) = obj.get("not") {
        check_structural(not, &format!("{path}.not"), true, errors);
    }
    if let Some(rules) = obj.get("x-kubernetes-validations") {
        for r in rules.as_array().into_iter().flatten() {
            if !r["rule"].is_string() || !r["message"].is_string() {
                errors.push(format!("{path}: CEL rule without rule/message: {r}"));
            }
        }
    }
}

#[test]
fn schema_is_structural() {
    let schema = root_schema();
    assert_eq!(schema["type"], "object");
    let mut errors = Vec::new();
    check_structural(&schema, "", false, &mut errors);
    assert!(
        errors.is_empty(),
        "non-structural schema:\n{}",
        errors.join("\n")
    );
    // Lists referenced by CEL rules are bounded (the apiserver's cost estimate needs maxItems).
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["volumes"]["maxItems"], 32);
    assert_eq!(spec["volumes"]["minItems"], 1);
    assert_eq!(spec["routes"]["maxItems"], 64);
    assert_eq!(
        spec["routes"]["items"]["properties"]["split"]["maxItems"],
        16
    );
    // Defaults and minimums from the issue.
    let pool = &spec["volumes"]["items"]["properties"]["pool"]["properties"];
    assert_eq!(pool["threads"]["minimum"], 1.0);
    assert_eq!(
        pool["threads"]["default"],
        json!(content_server::config::DEFAULT_THREADS)
    );
    assert_eq!(
        pool["maxQueue"]["default"],
        json!(content_server::config::DEFAULT_MAX_QUEUE)
    );
    assert_eq!(pool["offload"]["enum"], json!(["always", "never", "auto"]));
    assert_eq!(spec["metrics"]["properties"]["port"]["default"], 9190);
    assert_eq!(spec["replicas"]["minimum"], 0.0);
    assert_eq!(
        spec["pdb"]["properties"]["maxUnavailable"]["x-kubernetes-int-or-string"],
        true
    );
}

fn collect_rules(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(o) => {
            if let Some(rules) = o.get("x-kubernetes-validations").and_then(Value::as_array) {
                out.extend(
                    rules
                        .iter()
                        .filter_map(|r| r["rule"].as_str().map(str::to_string)),
                );
            }
            for v in o.values() {
                collect_rules(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

#[test]
fn every_cel_rule_compiles() {
    let mut rules = Vec::new();
    collect_rules(&root_schema(), &mut rules);
    assert!(
        rules.len() >= 8,
        "expected the CEL rules in the schema, found {rules:?}"
    );
    for r in rules {
        if let Err(e) = kube_cel::cel::Program::compile(&r) {
            panic!("rule does not compile: {r}\n{e}");
        }
    }
}

fn cel_errors(obj: &Value) -> Vec<String> {
    match kube_cel::validate(&root_schema(), obj, None) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    }
}

/// An example as the apiserver stores it (schema defaults applied).
fn defaulted(file: &str) -> Value {
    serde_json::to_value(example(file)).expect("json")
}

#[test]
fn cel_rules_accept_every_example() {
    for (file, _, cs) in example_contentservers() {
        let obj = serde_json::to_value(&cs).expect("json");
        assert_eq!(cel_errors(&obj), Vec::<String>::new(), "examples/{file}");
    }
}

fn assert_rejected(obj: &Value, message: &str) {
    let errs = cel_errors(obj);
    assert!(
        errs.iter().any(|e| e.contains(message)),
        "expected a CEL error containing {message:?}, got {errs:?}"
    );
}

#[test]
fn cel_rejects_duplicate_volume_names() {
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["volumes"][1]["name"] = json!("disk1");
    assert_rejected(&obj, "volume names must be unique");
}

#[test]
fn cel_rejects_routes_to_unknown_volumes() {
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["routes"][0]["split"][2]["volume"] = json!("disk4");
    assert_rejected(&obj, "every route must name volumes listed in spec.volumes");
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["routes"] =
        json!([{"prefix": "/a/", "volume": "nope"}, {"prefix": "/", "volume": "disk1"}]);
    assert_rejected(&obj, "every route must name volumes listed in spec.volumes");
    obj["spec"]["routes"][0]["volume"] = json!("disk2");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
}

#[test]
fn cel_rejects_split_over_100_percent_and_accepts_exactly_100() {
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["routes"][0]["split"][1]["percent"] = json!(70.5);
    assert_rejected(&obj, "split percentages must add up to 100");
    obj["spec"]["routes"][0]["split"][1]["percent"] = json!(33.3);
    obj["spec"]["routes"][0]["split"][2]["percent"] = json!(33.4);
    assert_eq!(
        cel_errors(&obj),
        Vec::<String>::new(),
        "33.3 + 33.3 + 33.4 is fine"
    );
    obj["spec"]["routes"][0]["split"][2]["percent"] = json!(50);
    assert_rejected(&obj, "split percentages must add up to 100");
    // Shares that are 100 exactly but whose float sum is a rounding over it,
    // 100.00000000000001 (the server allows the same 1e-9 margin).
    obj["spec"]["routes"][0]["split"] = json!([
        {"volume": "disk1", "percent": 25.67},
        {"volume": "disk2", "percent": 64.93},
        {"volume": "disk3", "percent": 9.4}
    ]);
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    // Less than 100 with every target's percent given: the server refuses it (a share of
    // the URIs would go nowhere), so the API server must too.
    obj["spec"]["routes"][0]["split"] = json!([
        {"volume": "disk1", "percent": 30},
        {"volume": "disk2", "percent": 30}
    ]);
    assert_rejected(&obj, "split percentages must add up to 100");
    // The rest taken by the last target: the others must leave it a share.
    obj["spec"]["routes"][0]["split"] = json!([
        {"volume": "disk1", "percent": 100},
        {"volume": "disk2"}
    ]);
    assert_rejected(&obj, "split percentages must add up to 100");
    obj["spec"]["routes"][0]["split"][0]["percent"] = json!(99.9999);
    assert_eq!(
        cel_errors(&obj),
        Vec::<String>::new(),
        "the smallest share is left"
    );
    obj["spec"]["routes"][0]["split"][0]["percent"] = json!(40);
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
}

#[test]
fn cel_rejects_rest_share_that_is_not_last() {
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["routes"][0]["split"] = json!([
        {"volume": "disk1"}, {"volume": "disk2", "percent": 50}, {"volume": "disk3", "percent": 10}
    ]);
    assert_rejected(&obj, "only the last split target may omit percent");
}

#[test]
fn cel_rejects_volume_and_split_together_or_neither() {
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["routes"][0]["volume"] = json!("disk1");
    assert_rejected(&obj, "set exactly one of volume and split");
    let mut obj = defaulted("media-node.yaml");
    obj["spec"]["routes"] = json!([{"prefix": "/"}]);
    assert_rejected(&obj, "set exactly one of volume and split");
}

#[test]
fn cel_rejects_two_sources_and_unopted_host_path() {
    let mut obj = defaulted("minimal.yaml");
    obj["spec"]["volumes"][0]["source"]["emptyDir"] = json!({});
    assert_rejected(
        &obj,
        "set exactly one of persistentVolumeClaim, claimTemplate, emptyDir, hostPath",
    );

    let mut obj = defaulted("minimal.yaml");
    obj["spec"]["volumes"][0]["source"] = json!({"hostPath": {"path": "/mnt/media"}});
    assert_rejected(&obj, "hostPath volumes require spec.allowHostPath: true");
    obj["spec"]["allowHostPath"] = json!(true);
    assert_eq!(
        cel_errors(&obj),
        Vec::<String>::new(),
        "allowed with the opt-in"
    );
}

#[test]
fn cel_requires_routes_for_several_volumes_and_distinct_ports() {
    let mut obj = defaulted("media-node.yaml");
    obj["spec"].as_object_mut().expect("spec").remove("routes");
    assert_rejected(&obj, "with more than one volume, routes must say");
    let mut obj = defaulted("minimal.yaml");
    obj["spec"]["metrics"]["port"] = json!(8080);
    assert_rejected(&obj, "metrics.port must differ from server.port");
    // The Service exposes the service port and the metrics port: Kubernetes refuses a Service
    // with the same port twice.
    let mut obj = defaulted("minimal.yaml");
    obj["spec"]["service"]["port"] = obj["spec"]["metrics"]["port"].clone();
    assert_rejected(&obj, "service.port must differ from metrics.port");
    // A published Service carries only `http` (metrics have a ClusterIP Service of their own).
    for published in ["NodePort", "LoadBalancer"] {
        obj["spec"]["service"]["type"] = json!(published);
        assert_eq!(cel_errors(&obj), Vec::<String>::new(), "{published}");
    }
}

#[test]
fn cel_rejects_a_cache_on_an_image_volume() {
    let mut obj = defaulted("edge-cache.yaml");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    let source = &mut obj["spec"]["volumes"][0]["source"];
    *source = json!({"image": {"reference": "registry.example/cache-seed:1"}});
    assert_rejected(&obj, "an image volume is read-only");
}

/// A cache on an existing claim is mounted by every pod, and a cache directory has one server:
/// more than one replica, or an autoscaler allowed more, is refused at apply time on the field.
/// A cache per pod (claimTemplate, emptyDir) or a hostPath (one pod per node) takes any count.
#[test]
fn cel_allows_one_replica_with_a_cache_on_an_existing_claim() {
    let mut obj = defaulted("edge-cache.yaml");
    obj["spec"]["volumes"][1]["source"] = json!({"persistentVolumeClaim": {"claimName": "c"}});
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_rejected(
        &obj,
        "replicas must be at most 1 while a cache volume is an existing persistentVolumeClaim",
    );
    obj["spec"]["replicas"] = json!(1);
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    obj["spec"]["autoscaling"] = json!({"maxReplicas": 2});
    assert_rejected(
        &obj,
        "autoscaling.maxReplicas must be at most 1 while a cache volume",
    );
    obj["spec"]["autoscaling"]["maxReplicas"] = json!(1);
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    // Without spec.replicas (the HPA owns it): nothing to compare.
    obj["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("replicas");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());

    let mut obj = defaulted("edge-cache.yaml");
    obj["spec"]["allowHostPath"] = json!(true);
    obj["spec"]["volumes"][1]["source"] = json!({"hostPath": {"path": "/mnt/cache"}});
    obj["spec"]["volumes"][2]["source"] = json!({"emptyDir": {}});
    obj["spec"]["autoscaling"] = json!({"maxReplicas": 10});
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    // An existing claim without a cache is shared by any number of pods.
    let mut obj = defaulted("minimal.yaml");
    obj["spec"]["replicas"] = json!(5);
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
}

#[test]
fn crd_subcommand_prints_the_committed_yaml() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_content-operator"))
        .arg("crd")
        .output()
        .expect("run content-operator crd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed =
        std::fs::read_to_string(repo_root().join("crds/contentservers.contentserver.dev.yaml"))
            .expect("committed CRD");
    assert_eq!(String::from_utf8_lossy(&out.stdout), committed);
}

/// Every field written in `raw` survives in `typed` (nothing a typo would make the apiserver prune).
fn assert_subset(raw: &Value, typed: &Value, path: &str) {
    match (raw, typed) {
        (Value::Object(r), Value::Object(t)) => {
            for (k, v) in r {
                let tv = t
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k}: unknown field (would be pruned)"));
                assert_subset(v, tv, &format!("{path}.{k}"));
            }
        }
        (Value::Array(r), Value::Array(t)) => {
            assert_eq!(r.len(), t.len(), "{path}");
            for (i, (a, b)) in r.iter().zip(t).enumerate() {
                assert_subset(a, b, &format!("{path}[{i}]"));
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            assert_eq!(a.as_f64(), b.as_f64(), "{path}");
        }
        (a, b) => assert_eq!(a, b, "{path}"),
    }
}

#[test]
fn examples_use_only_fields_the_crd_knows() {
    for (file, raw, cs) in example_contentservers() {
        let typed = serde_json::to_value(&cs).expect("json");
        assert_subset(
            &raw["spec"],
            &typed["spec"],
            &format!("examples/{file}: spec"),
        );
    }
}

/// The schema node at a path of property names below `spec`.
fn spec_field(path: &[&str]) -> Value {
    let mut node = root_schema()["properties"]["spec"].clone();
    for p in path {
        node = node["properties"][*p].clone();
        if node.is_null() {
            panic!("no spec field {path:?}");
        }
    }
    node
}

#[test]
fn autoscaling_schema_bounds_and_min_not_above_max() {
    // The pool target stops at 85: the metric tops out at 1, the HPA needs 1.1 x its target.
    for (f, max) in [
        ("targetPoolUtilization", 85.0),
        ("targetCPUUtilization", 100.0),
    ] {
        let n = spec_field(&["autoscaling", f]);
        assert_eq!(
            (n["minimum"].as_f64(), n["maximum"].as_f64()),
            (Some(1.0), Some(max)),
            "{f}"
        );
    }
    let window = spec_field(&["autoscaling", "scaleDownStabilizationSeconds"]);
    assert_eq!(
        (window["default"].as_f64(), window["maximum"].as_f64()),
        (Some(1800.0), Some(3600.0))
    );
    assert_eq!(
        spec_field(&["autoscaling", "minReplicas"])["minimum"].as_f64(),
        Some(1.0)
    );
    let required =
        root_schema()["properties"]["spec"]["properties"]["autoscaling"]["required"].clone();
    assert_eq!(required, json!(["maxReplicas"]));

    let mut obj = defaulted("hpa.yaml");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    obj["spec"]["autoscaling"]["minReplicas"] = json!(11);
    assert_rejected(&obj, "minReplicas must not exceed maxReplicas");
    obj["spec"]["autoscaling"]["minReplicas"] = json!(10);
    assert_eq!(cel_errors(&obj), Vec::<String>::new(), "min == max is fine");
}

#[test]
fn image_source_counts_as_one_source() {
    let mut obj = defaulted("minimal.yaml");
    obj["spec"]["volumes"][0]["source"] =
        json!({"image": {"reference": "registry.example/site:1"}});
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    obj["spec"]["volumes"][0]["source"]["emptyDir"] = json!({});
    assert_rejected(
        &obj,
        "set exactly one of persistentVolumeClaim, claimTemplate, emptyDir, hostPath, image",
    );
    let image =
        spec_field(&["volumes"])["items"]["properties"]["source"]["properties"]["image"].clone();
    assert_eq!(image["required"], json!(["reference"]));
    assert_eq!(
        image["properties"]["pullPolicy"]["enum"],
        json!(["Always", "IfNotPresent", "Never", null]),
        "null: the field is optional (nullable)"
    );
}

#[test]
fn expose_and_network_policy_schema() {
    let route = spec_field(&["expose", "httpRoute"]);
    assert_eq!(route["required"], json!(["parentRefs"]));
    assert_eq!(route["properties"]["parentRefs"]["minItems"], json!(1));
    let ingress = spec_field(&["expose", "ingress"]);
    assert_eq!(ingress["required"], json!(["hosts"]));
    assert_eq!(
        ingress["properties"]["tls"]["required"],
        json!(["secretName"])
    );
    let host = &ingress["properties"]["hosts"]["items"];
    let re = host["pattern"].as_str().expect("host pattern");
    assert!(re.starts_with("^(\\*\\.)?[a-z0-9]"), "{re}");

    let mut obj = defaulted("exposed.yaml");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    obj["spec"]["networkPolicy"]["metricsFrom"] = json!([{}]);
    assert_rejected(&obj, "set namespaceSelector, podSelector or both");
    obj["spec"]["networkPolicy"]["metricsFrom"] = json!([{"podSelector": {}}]);
    assert_eq!(
        cel_errors(&obj),
        Vec::<String>::new(),
        "an empty selector is a valid peer"
    );
}

#[test]
fn cel_cache_routes_need_the_origin_and_cache_volumes() {
    let obj = defaulted("edge-cache.yaml");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    // Removing one field at a JSON pointer breaks one rule.
    for (pointer, field, message) in [
        ("/spec", "origin", "a route with cache needs spec.origin"),
        (
            "/spec/volumes/2",
            "cache",
            "a route with cache must use only volumes with cache",
        ),
        (
            "/spec/routes/0",
            "cache",
            "a volume with cache may only be used by routes with cache",
        ),
    ] {
        let mut broken = obj.clone();
        let parent = broken.pointer_mut(pointer).and_then(Value::as_object_mut);
        let removed = parent.expect(pointer).remove(field);
        assert!(removed.is_some(), "{pointer}/{field} is in the example");
        assert_rejected(&broken, message);
    }
    let mut two_cas = obj.clone();
    two_cas["spec"]["origin"]["ca"]["secretKeyRef"] = json!({"name": "s", "key": "ca.pem"});
    assert_rejected(
        &two_cas,
        "set exactly one of secretKeyRef and configMapKeyRef",
    );
}

#[test]
fn schema_rejects_origin_urls_without_scheme_and_bad_quantities() {
    let schema = root_schema();
    let origin = &schema["properties"]["spec"]["properties"]["origin"];
    let pattern = origin["properties"]["servers"]["items"]["pattern"]
        .as_str()
        .expect("servers[] pattern");
    assert_eq!(pattern, r"^https?://[^/?#@\s]+/?$");
    assert_eq!(origin["required"], json!(["servers"]));
    let cache = &schema["properties"]["spec"]["properties"]["volumes"]["items"]["properties"]
        ["cache"]["properties"];
    for field in ["maxSize", "sliceSize"] {
        assert_eq!(
            cache[field]["pattern"],
            schema["properties"]["spec"]["properties"]["volumes"]["items"]["properties"]["source"]
                ["properties"]["claimTemplate"]["properties"]["size"]["pattern"],
            "{field} is a quantity"
        );
    }
}

#[test]
fn congestion_control_schema_is_an_optional_kernel_name() {
    let cc = spec_field(&["server", "congestionControl"]);
    assert_eq!(cc["type"], json!("string"));
    assert_eq!(cc["pattern"], json!("^[a-z0-9_]{1,15}$"));
    assert!(cc.get("default").is_none(), "absent = the node's default");
}

/// The schema carries the server's duration bounds (one day for the connection timeouts),
/// so the apiserver refuses what every pod would refuse; the operator's own check reports it
/// on the spec field too.
#[test]
fn timeout_schema_has_the_servers_upper_bound() {
    for f in [
        "keepaliveTimeoutSecs",
        "headerReadTimeoutSecs",
        "sendTimeoutSecs",
    ] {
        let n = spec_field(&["server", "limits", f]);
        assert_eq!(
            (n["minimum"].as_f64(), n["maximum"].as_f64()),
            (Some(1.0), Some(86400.0)),
            "{f}"
        );
    }
    let mut cs = example("minimal.yaml");
    cs.spec.server.limits.header_read_timeout_secs = 86_401;
    let errs = content_operator::validation::validate(&cs.spec);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.server.limits.headerReadTimeoutSecs");
}

/// Every integer node of the schema (spec and status, k8s-openapi types included) with its path.
fn integer_nodes(node: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    let Some(obj) = node.as_object() else { return };
    if obj.get("type") == Some(&json!("integer")) {
        out.push((path.to_string(), node.clone()));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            integer_nodes(v, &format!("{path}.{k}"), out);
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(sub) = obj.get(key) {
            integer_nodes(sub, &format!("{path}{suffix}"), out);
        }
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        for (i, s) in obj
            .get(j)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            integer_nodes(s, &format!("{path}.{j}[{i}]"), out);
        }
    }
}

/// Kubernetes stores every integer as an int64 and ignores `format`: a value the Rust type
/// cannot hold would be accepted by the apiserver and leave that ContentServer unreadable to the
/// operator, never reconciled. So each integer field carries its type's bounds (or tighter ones).
#[test]
fn every_integer_field_is_bounded_by_its_rust_type() {
    let mut ints = Vec::new();
    integer_nodes(&root_schema(), "", &mut ints);
    assert!(ints.len() > 40, "found only {} integer fields", ints.len());
    let mut errors = Vec::new();
    for (path, n) in &ints {
        let (min, max) = (n["minimum"].as_f64(), n["maximum"].as_f64());
        let format = n["format"].as_str().unwrap_or("");
        let ok = match format {
            // The apiserver's own integer: whatever it stores decodes.
            "int64" => true,
            "uint64" => min.is_some_and(|m| m >= 0.0),
            f => match content_operator::crd::bounds::format_range(f) {
                Some((lo, hi)) => {
                    min.is_some_and(|m| m >= lo as f64) && max.is_some_and(|m| m <= hi as f64)
                }
                None => false,
            },
        };
        if !ok {
            errors.push(format!("{path}: {format:?} min {min:?} max {max:?}"));
        }
    }
    assert!(
        errors.is_empty(),
        "unbounded integers:\n{}",
        errors.join("\n")
    );
    // The ones the black-box test tripped on, and one inside a k8s-openapi type.
    for (path, max) in [
        (".spec.replicas", 2147483647.0),
        (".spec.server.backlog", 2147483647.0),
        (".spec.server.limits.maxConnections", 4294967295.0),
        (
            ".spec.scheduling.topologySpreadConstraints[].maxSkew",
            2147483647.0,
        ),
        (".status.replicas", 2147483647.0),
    ] {
        let n = ints
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("no integer {path}"));
        assert_eq!(n.1["maximum"].as_f64(), Some(max), "{path}");
    }
    assert_eq!(
        spec_field(&["volumes"])["items"]["properties"]["pool"]["properties"]["maxQueue"]
            ["maximum"]
            .as_f64(),
        Some(16777216.0),
        "a field's own tighter bound is kept"
    );
}

/// pdb.maxUnavailable is an int-or-string (an i32 or a percentage): the apiserver applies
/// `minimum`/`maximum` to a number and `pattern` to a string (as CRDs made by controller-gen do).
#[test]
fn pdb_max_unavailable_is_bounded_and_a_percentage() {
    let n = spec_field(&["pdb", "maxUnavailable"]);
    assert_eq!(n["x-kubernetes-int-or-string"], true);
    assert_eq!(
        (n["minimum"].as_f64(), n["maximum"].as_f64()),
        (Some(0.0), Some(2147483647.0))
    );
    assert_eq!(n["pattern"], content_operator::crd::PERCENT_PATTERN);
    // The pattern takes what the operator takes, evaluated with CEL's RE2 `matches`.
    let matches = |v: &str| {
        let expr = format!(
            "'{v}'.matches('{}')",
            content_operator::crd::PERCENT_PATTERN
        );
        let program = kube_cel::cel::Program::compile(&expr).expect("compiles");
        let ctx = kube_cel::cel::Context::default();
        program.execute(&ctx).expect("runs") == kube_cel::cel::Value::Bool(true)
    };
    for ok in ["0%", "25%", "100%", "05%"] {
        assert!(matches(ok), "{ok}");
    }
    for bad in ["abc", "200%", "101%", "5", "%", "-1%"] {
        assert!(!matches(bad), "{bad}");
    }
}

#[test]
fn cel_rejects_a_zero_claim_size() {
    let mut obj = defaulted("media-node.yaml");
    let i = obj["spec"]["volumes"]
        .as_array()
        .and_then(|v| {
            v.iter()
                .position(|v| v["source"]["claimTemplate"].is_object())
        })
        .expect("claimTemplate volume");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    for zero in ["0", "0Gi", "00.0"] {
        obj["spec"]["volumes"][i]["source"]["claimTemplate"]["size"] = json!(zero);
        assert_rejected(&obj, "size must be more than 0");
    }
    obj["spec"]["volumes"][i]["source"]["claimTemplate"]["size"] = json!("0.5Gi");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
}

/// An IP address as an Ingress host or HTTPRoute hostname is refused at admission (the API
/// server refuses the Ingress, the Gateway API the hostname); names of digits are not.
#[test]
fn cel_rejects_ip_addresses_as_host_names() {
    for (part, field) in [("ingress", "hosts"), ("httpRoute", "hostnames")] {
        let mut obj = defaulted("exposed.yaml");
        obj["spec"]["expose"][part][field][0] = json!("10.0.0.1");
        assert_rejected(&obj, "must be a DNS name, not an IP address");
        for fine in ["10.0.0.256", "1.2.3", "010.0.0.1", "cdn1.example.com"] {
            obj["spec"]["expose"][part][field][0] = json!(fine);
            assert_eq!(cel_errors(&obj), Vec::<String>::new(), "{fine}");
        }
    }
}

/// hostPath types other than the directory ones are refused by the schema (a volume is a
/// directory of files; the kubelet would refuse an unknown type at pod creation).
#[test]
fn host_path_type_is_a_directory_type() {
    let schema = root_schema();
    let t = &schema["properties"]["spec"]["properties"]["volumes"]["items"]["properties"]["source"]
        ["properties"]["hostPath"]["properties"]["type"];
    let names: Vec<&str> = t["enum"]
        .as_array()
        .expect("an enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(names, ["Directory", "DirectoryOrCreate"], "{t}");
}

const SECTION_REQUIRED: &str =
    "sectionName must be specified when parentRefs includes 2 or more references to the same parent";
const SECTION_UNIQUE: &str =
    "sectionName must be unique when parentRefs includes 2 or more references to the same parent";

/// Two references to one Gateway must each name a different listener: the Gateway API's CEL
/// rules for an HTTPRoute's parentRefs, on ours, so the route is refused at admission and not at
/// apply time (`port` does not tell references apart, as upstream).
#[test]
fn cel_refuses_parent_refs_the_gateway_api_refuses() {
    let mut obj = defaulted("exposed.yaml");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    for (refs, message) in [
        (json!([{"name": "gw"}, {"name": "gw"}]), SECTION_UNIQUE),
        (
            json!([{"name": "gw"}, {"name": "gw", "sectionName": "https"}]),
            SECTION_REQUIRED,
        ),
        (
            json!([{"name": "gw", "sectionName": "a", "port": 443},
                   {"name": "gw", "sectionName": "a", "port": 8443}]),
            SECTION_UNIQUE,
        ),
        (
            json!([{"name": "gw", "namespace": "infra", "sectionName": "a"},
                   {"name": "gw", "namespace": "infra", "sectionName": "a"}]),
            SECTION_UNIQUE,
        ),
        (
            json!([{"name": "gw", "port": 443}, {"name": "gw", "port": 8443}]),
            SECTION_UNIQUE,
        ),
    ] {
        obj["spec"]["expose"]["httpRoute"]["parentRefs"] = refs.clone();
        let errs = cel_errors(&obj);
        assert!(
            errs.iter()
                .any(|e| e.contains(message) && e.contains("spec.expose.httpRoute.parentRefs")),
            "{refs}: expected {message:?}, got {errs:?}"
        );
    }
    for refs in [
        json!([{"name": "gw", "sectionName": "http"}, {"name": "gw", "sectionName": "https"}]),
        json!([{"name": "gw", "sectionName": "a", "port": 443},
               {"name": "gw", "sectionName": "b", "port": 443}]),
        json!([{"name": "gw"}, {"name": "other"}]),
        // Another namespace is another Gateway; so is an unset one (the route's own namespace,
        // which upstream does not resolve either).
        json!([{"name": "gw", "namespace": "a"}, {"name": "gw", "namespace": "b"}]),
        json!([{"name": "gw"}, {"name": "gw", "namespace": "infra"}]),
        json!([{"name": "gw", "sectionName": "a"}, {"name": "gw", "namespace": "infra"},
               {"name": "gw", "sectionName": "b"}]),
    ] {
        obj["spec"]["expose"]["httpRoute"]["parentRefs"] = refs.clone();
        assert_eq!(cel_errors(&obj), Vec::<String>::new(), "{refs}");
    }
}

/// A CPU target needs a CPU request above 0 (a CPU limit alone defaults it): the HPA measures
/// utilization against it and, with the metric missing, does not scale down.
#[test]
fn cel_refuses_a_cpu_target_without_a_cpu_request() {
    let mut obj = defaulted("hpa.yaml");
    assert_eq!(obj["spec"]["autoscaling"]["targetCPUUtilization"], 80);
    assert_eq!(obj["spec"]["resources"]["requests"]["cpu"], "500m");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
    let message = "autoscaling.targetCPUUtilization needs resources.requests.cpu above 0";
    for resources in [
        json!({"requests": {"memory": "256Mi"}, "limits": {"memory": "512Mi"}}),
        json!({"requests": {"cpu": "0"}}),
        json!({"requests": {"cpu": 0}}),
        json!({"requests": {"cpu": "0m"}, "limits": {"cpu": "2"}}),
        json!({"limits": {"memory": "512Mi"}}),
        json!({}),
    ] {
        obj["spec"]["resources"] = resources.clone();
        let errs = cel_errors(&obj);
        assert!(
            errs.iter().any(|e| e.contains(message)
                && e.contains("spec.autoscaling.targetCPUUtilization")),
            "{resources}: {errs:?}"
        );
    }
    obj["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("resources");
    assert_rejected(&obj, message);
    for resources in [
        json!({"requests": {"cpu": "500m"}}),
        json!({"requests": {"cpu": 1}}),
        json!({"requests": {"cpu": "0.1"}}),
        json!({"limits": {"cpu": "1"}}),
    ] {
        obj["spec"]["resources"] = resources.clone();
        assert_eq!(cel_errors(&obj), Vec::<String>::new(), "{resources}");
    }
    // Without a CPU target, no request is needed.
    obj["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("resources");
    obj["spec"]["autoscaling"]
        .as_object_mut()
        .expect("autoscaling")
        .remove("targetCPUUtilization");
    assert_eq!(cel_errors(&obj), Vec::<String>::new());
}

/// Every field the schema lets be null (`nullable: true`: the API server keeps a null there)
/// is one the operator can read as null: set to null in each example in turn, the object
/// still decodes. (`pdb.maxUnavailable` was nullable but not optional: such a ContentServer
/// was admitted and then never reconciled.)
#[test]
fn every_nullable_field_decodes_as_null() {
    fn walk(value: &Value, schema: &Value, path: &mut Vec<Value>, found: &mut Vec<Vec<Value>>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let Some(s) = schema["properties"].get(k) else {
                        continue;
                    };
                    path.push(json!(k));
                    if s["nullable"] == json!(true) {
                        found.push(path.clone());
                    }
                    walk(v, s, path, found);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    path.push(json!(i));
                    walk(v, &schema["items"], path, found);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let schema = root_schema();
    let mut checked = 0;
    for (file, _, cs) in example_contentservers() {
        let obj = serde_json::to_value(&cs).expect("json");
        let mut found = Vec::new();
        walk(&obj, &schema, &mut Vec::new(), &mut found);
        for path in found {
            let mut nulled = obj.clone();
            let mut node = &mut nulled;
            for p in &path {
                node = match p {
                    Value::String(k) => &mut node[k.as_str()],
                    Value::Number(i) => &mut node[i.as_u64().expect("index") as usize],
                    _ => unreachable!(),
                };
            }
            *node = Value::Null;
            if let Err(e) = serde_json::from_value::<ContentServer>(nulled) {
                panic!(
                    "examples/{file}: {path:?} set to null is admitted but does not decode: {e}"
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked > 50,
        "only {checked} nullable fields set in the examples"
    );
}
