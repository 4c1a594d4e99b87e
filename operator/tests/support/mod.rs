//! Test support: an in-memory Kubernetes API server (a tower Service behind a real
//! `kube::Client`) and fixtures loaded from `examples/`.
//!
//! The fake stores objects by collection path and name and answers GET, LIST, POST, PUT (with
//! resourceVersion conflicts), PATCH (server-side apply as "replace the applied fields, keep
//! status"; JSON merge patch; both on the main resource or `/status`) and DELETE, bumping
//! `metadata.generation` when anything outside metadata/status changes. Every request is logged
//! so tests can assert what the operator did — and what it did not do. Failures (`fail`),
//! requests that are never answered (`hang`) and slow answers (`delay`) can be injected.
//! Watches stay open and silent (objects come from the initial LIST), except on the collections
//! given to `stream_watches`, whose watches get every later write as a watch event.
#![allow(dead_code)]

use bytes::Bytes;

use content_operator::crd::ContentServer;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

impl Logged {
    pub fn is_read(&self) -> bool {
        self.method == "GET"
    }
    pub fn is_status(&self) -> bool {
        self.path.ends_with("/status")
    }
    pub fn is_event(&self) -> bool {
        self.path.contains("/events")
    }
    /// A write to anything but the ContentServer's status or Events: a child change.
    pub fn is_child_write(&self) -> bool {
        !self.is_read() && !self.is_status() && !self.is_event()
    }
}

#[derive(Default)]
struct State {
    /// Injected failures: (method, path substring, HTTP code).
    failures: Vec<(String, String, u16)>,
    /// Injected failures answered with a non-JSON body: (method, path substring, code, body).
    raw_failures: Vec<(String, String, u16, String)>,
    /// Injected hangs: (method, path substring) never answered.
    hangs: Vec<(String, String)>,
    /// Injected delays: (method, path substring, how long before the request is handled).
    delays: Vec<(String, String, std::time::Duration)>,
    objects: BTreeMap<(String, String), Value>,
    log: Vec<Logged>,
    rv: u64,
    uid: u64,
    /// Collections whose watches stream every later write as an event ([`FakeApi::stream_watches`]).
    streamed: Vec<String>,
    /// Open streamed watches: (collection, where its events go).
    watchers: Vec<(String, futures::channel::mpsc::UnboundedSender<Bytes>)>,
    /// Injected failures say which attempt they answer ([`FakeApi::vary_failure_messages`]).
    vary_failures: bool,
    failures_answered: u64,
}

/// The in-memory API server.
#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

/// Collection path of a namespaced resource, e.g. `coll("apps/v1", "default", "deployments")`.
pub fn coll(group_version: &str, ns: &str, plural: &str) -> String {
    if group_version == "v1" {
        format!("/api/v1/namespaces/{ns}/{plural}")
    } else {
        format!("/apis/{group_version}/namespaces/{ns}/{plural}")
    }
}

pub const NS: &str = "media-ns";

/// Collection paths in [`NS`], by kind: `deployments()`, `configmaps()`, ...
macro_rules! collections {
    ($($fn:ident => $gv:literal / $plural:literal),* $(,)?) => {
        $(pub fn $fn() -> String {
            coll($gv, NS, $plural)
        })*
    };
}

collections! {
    deployments => "apps/v1" / "deployments",
    statefulsets => "apps/v1" / "statefulsets",
    configmaps => "v1" / "configmaps",
    services => "v1" / "services",
    pdbs => "policy/v1" / "poddisruptionbudgets",
    contentservers => "contentserver.dev/v1alpha1" / "contentservers",
    servicemonitors => "monitoring.coreos.com/v1" / "servicemonitors",
    hpas => "autoscaling/v2" / "horizontalpodautoscalers",
    ingresses => "networking.k8s.io/v1" / "ingresses",
    networkpolicies => "networking.k8s.io/v1" / "networkpolicies",
    httproutes => "gateway.networking.k8s.io/v1" / "httproutes",
}

pub fn crds() -> String {
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into()
}

/// API groups the fake serves without a CRD (built in, plus the ContentServer's own).
const SERVED_GROUPS: &[&str] = &[
    "apps",
    "policy",
    "autoscaling",
    "networking.k8s.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "apiextensions.k8s.io",
    "contentserver.dev",
];

/// For a collection of a CRD-defined kind (e.g. ServiceMonitor, HTTPRoute): the CRD's name
/// (`plural.group`) that must exist in the fake for the kind to be served.
fn crd_backed(collection: &str) -> Option<String> {
    let rest = collection.strip_prefix("/apis/")?;
    let group = rest.split('/').next()?;
    if SERVED_GROUPS.contains(&group) {
        return None;
    }
    let plural = rest.rsplit('/').next()?;
    Some(format!("{plural}.{group}"))
}

/// Split a request path into (collection, name, subresource).
fn split_path(path: &str) -> (String, Option<String>, Option<String>) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let prefix = if segs.first() == Some(&"api") { 2 } else { 3 };
    let rest = &segs[prefix.min(segs.len())..];
    let (coll_len, rest2) = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        (prefix + 3, &rest[3..])
    } else {
        (prefix + 1, rest.get(1..).unwrap_or(&[]))
    };
    let collection = format!("/{}", segs[..coll_len.min(segs.len())].join("/"));
    (
        collection,
        rest2.first().map(|s| s.to_string()),
        rest2.get(1).map(|s| s.to_string()),
    )
}

fn merge_patch(target: &mut Value, patch: &Value) {
    if let Value::Object(p) = patch {
        if !target.is_object() {
            *target = json!({});
        }
        let t = target.as_object_mut().expect("object");
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    } else {
        *target = patch.clone();
    }
}

fn status_response(code: u16, reason: &str, message: String) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// Everything except metadata and status: changes here bump the generation.
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

impl FakeApi {
    pub fn new() -> FakeApi {
        FakeApi::default()
    }

    /// A kube Client talking to this fake.
    pub fn client(&self) -> Client {
        let fake = self.clone();
        let svc = tower::service_fn(move |req: Request<Body>| {
            let fake = fake.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                if fake.hangs_on(parts.method.as_str(), parts.uri.path()) {
                    // An API server that accepted the request and never answers.
                    futures::future::pending::<()>().await;
                }
                if let Some(d) = fake.delay_of(parts.method.as_str(), parts.uri.path()) {
                    // A slow API server: the request is handled (and answered) after `d`.
                    tokio::time::sleep(d).await;
                }
                if let Some((code, body)) =
                    fake.raw_failure(parts.method.as_str(), parts.uri.path())
                {
                    // A proxy in front of the API server answering with its own error page.
                    let resp = Response::builder()
                        .status(StatusCode::from_u16(code).expect("status code"))
                        .header("content-type", "text/html")
                        .body(Full::new(Bytes::from(body)).boxed())
                        .expect("response");
                    return Ok::<_, Infallible>(resp);
                }
                let watch = parts.uri.query().unwrap_or("").contains("watch=true");
                if watch {
                    if let Some(events) = fake.streamed_watch(parts.uri.path()) {
                        let frames = futures::StreamExt::map(events, |b| {
                            Ok::<_, Infallible>(Frame::data(b))
                        });
                        let resp = Response::builder()
                            .status(StatusCode::OK)
                            .header("content-type", "application/json")
                            .body(StreamBody::new(frames).boxed())
                            .expect("response");
                        return Ok::<_, Infallible>(resp);
                    }
                    // A watch that stays open and silent: objects come from the initial LIST.
                    let pending = futures::stream::pending::<Result<Frame<Bytes>, Infallible>>();
                    let resp = Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/json")
                        .body(StreamBody::new(pending).boxed())
                        .expect("response");
                    return Ok::<_, Infallible>(resp);
                }
                let (code, value) = fake.handle(
                    parts.method.as_str(),
                    parts.uri.path(),
                    parts.uri.query().unwrap_or(""),
                    parts
                        .headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or(""),
                    &bytes,
                );
                if parts.method != http::Method::GET && (200..300).contains(&code) {
                    fake.notify(parts.method.as_str(), parts.uri.path(), code, &value);
                }
                let resp = Response::builder()
                    .status(StatusCode::from_u16(code).expect("status code"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(value.to_string())).boxed())
                    .expect("response");
                Ok::<_, Infallible>(resp)
            }
        });
        Client::new(svc, NS)
    }

    fn handle(&self, method: &str, path: &str, query: &str, ct: &str, body: &[u8]) -> (u16, Value) {
        let body_v: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .or_else(|_| serde_yaml_ng::from_slice(body))
                .unwrap_or(Value::Null)
        };
        let mut st = self.state.lock().expect("fake state");
        st.log.push(Logged {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            content_type: ct.into(),
            body: body_v.clone(),
        });
        if let Some((_, _, code)) = st
            .failures
            .iter()
            .find(|(m, p, _)| m == method && path.contains(p.as_str()))
        {
            let code = *code;
            st.failures_answered += 1;
            let message = if st.vary_failures {
                // An admission webhook's denial quoting a temporary file name, say.
                format!(
                    "injected failure #{} for {method} {path}",
                    st.failures_answered
                )
            } else {
                format!("injected failure for {method} {path}")
            };
            return status_response(code, "Invalid", message);
        }
        let (collection, name, sub) = split_path(path);
        if let Some(crd) = crd_backed(&collection) {
            if !st.objects.contains_key(&(crds(), crd)) {
                // What the API server answers for a kind it does not serve.
                return status_response(
                    404,
                    "NotFound",
                    "the server could not find the requested resource".into(),
                );
            }
        }
        if sub.as_deref() == Some("scale") {
            return Self::scale(&mut st, method, collection, name, &body_v);
        }
        let ns = path
            .split("/namespaces/")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .map(str::to_string);
        match (method, name) {
            ("GET", None) => {
                let items: Vec<Value> = st
                    .objects
                    .iter()
                    .filter(|((c, _), _)| *c == collection)
                    .map(|(_, v)| v.clone())
                    .collect();
                (
                    200,
                    json!({"kind": "List", "apiVersion": "v1",
                             "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
                )
            }
            ("GET", Some(name)) => match st.objects.get(&(collection, name.clone())) {
                Some(v) => (200, v.clone()),
                None => status_response(404, "NotFound", format!("{name} not found")),
            },
            ("POST", None) => {
                let mut obj = body_v;
                let name = obj["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        let base = obj["metadata"]["generateName"]
                            .as_str()
                            .unwrap_or("obj-")
                            .to_string();
                        format!("{base}{}", st.uid + 1)
                    });
                if st.objects.contains_key(&(collection.clone(), name.clone())) {
                    return status_response(409, "AlreadyExists", format!("{name} already exists"));
                }
                Self::stamp_new(&mut st, &mut obj, &name, ns.as_deref());
                st.objects.insert((collection, name), obj.clone());
                (201, obj)
            }
            ("PUT", Some(name)) => {
                let key = (collection, name.clone());
                let Some(old) = st.objects.get(&key).cloned() else {
                    return status_response(404, "NotFound", format!("{name} not found"));
                };
                if body_v["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
                    return status_response(409, "Conflict", "the object has been modified".into());
                }
                let mut obj = body_v;
                if sub.as_deref() == Some("status") {
                    let mut o = old.clone();
                    o["status"] = obj["status"].take();
                    obj = o;
                }
                Self::stamp_update(&mut st, &old, &mut obj);
                st.objects.insert(key, obj.clone());
                (200, obj)
            }
            ("PATCH", Some(name)) => {
                let key = (collection, name.clone());
                let old = st.objects.get(&key).cloned();
                let mut obj;
                if ct.contains("apply-patch") {
                    match (&old, sub.as_deref()) {
                        (Some(old), Some(_)) => {
                            obj = old.clone();
                            obj["status"] = body_v["status"].clone();
                        }
                        (None, Some(_)) => {
                            return status_response(404, "NotFound", format!("{name} not found"))
                        }
                        (Some(old), None) => {
                            obj = body_v;
                            obj["status"] = old["status"].clone();
                            for k in [
                                "uid",
                                "creationTimestamp",
                                "resourceVersion",
                                "generation",
                                "deletionTimestamp",
                            ] {
                                obj["metadata"][k] = old["metadata"][k].clone();
                            }
                        }
                        (None, None) => {
                            obj = body_v;
                            Self::stamp_new(&mut st, &mut obj, &name, ns.as_deref());
                            st.objects.insert(key, obj.clone());
                            return (201, obj);
                        }
                    }
                } else if ct.contains("merge-patch") {
                    let Some(old) = &old else {
                        return status_response(404, "NotFound", format!("{name} not found"));
                    };
                    obj = old.clone();
                    if sub.as_deref() == Some("status") {
                        let mut status = obj["status"].clone();
                        merge_patch(&mut status, &body_v["status"]);
                        obj["status"] = status;
                    } else {
                        merge_patch(&mut obj, &body_v);
                    }
                } else {
                    return status_response(
                        415,
                        "UnsupportedMediaType",
                        format!("patch type {ct}"),
                    );
                }
                let old = old.unwrap_or(Value::Null);
                if let Some(o) = obj.as_object_mut() {
                    o.retain(|_, v| !v.is_null());
                }
                Self::stamp_update(&mut st, &old, &mut obj);
                st.objects.insert(key, obj.clone());
                (200, obj)
            }
            ("DELETE", Some(name)) => {
                let key = (collection, name.clone());
                let want_uid = body_v["preconditions"]["uid"].as_str();
                let uid = st.objects.get(&key).map(|o| o["metadata"]["uid"].clone());
                match (uid, want_uid) {
                    (None, _) => status_response(404, "NotFound", format!("{name} not found")),
                    (Some(uid), Some(want)) if uid.as_str() != Some(want) => status_response(
                        409,
                        "Conflict",
                        format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
                    ),
                    (Some(_), _) => match st.objects.remove(&key) {
                        Some(v) => (200, v),
                        None => status_response(404, "NotFound", format!("{name} not found")),
                    },
                }
            }
            _ => status_response(405, "MethodNotAllowed", format!("{method} {path}")),
        }
    }

    /// The scale subresource of a ContentServer (what an HPA reads and writes):
    /// spec.replicas <-> `spec.replicas`, status.replicas and status.selector from the status.
    fn scale(
        st: &mut State,
        method: &str,
        collection: String,
        name: Option<String>,
        body: &Value,
    ) -> (u16, Value) {
        let Some(name) = name else {
            return status_response(405, "MethodNotAllowed", format!("{method} scale"));
        };
        let key = (collection, name.clone());
        let Some(old) = st.objects.get(&key).cloned() else {
            return status_response(404, "NotFound", format!("{name} not found"));
        };
        if method == "PATCH" || method == "PUT" {
            let Some(replicas) = body["spec"]["replicas"].as_i64() else {
                return status_response(422, "Invalid", "scale: spec.replicas missing".into());
            };
            let mut obj = old.clone();
            obj["spec"]["replicas"] = json!(replicas);
            Self::stamp_update(st, &old, &mut obj);
            st.objects.insert(key.clone(), obj);
        }
        let obj = &st.objects[&key];
        (
            200,
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                   "metadata": {"name": name, "namespace": obj["metadata"]["namespace"],
                                "resourceVersion": obj["metadata"]["resourceVersion"]},
                   "spec": {"replicas": obj["spec"]["replicas"]},
                   "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
                              "selector": obj["status"]["selector"]}}),
        )
    }

    fn stamp_new(st: &mut State, obj: &mut Value, name: &str, ns: Option<&str>) {
        st.rv += 1;
        st.uid += 1;
        let m = &mut obj["metadata"];
        m["name"] = json!(name);
        if let Some(ns) = ns {
            m["namespace"] = json!(ns);
        }
        m["uid"] = json!(format!("uid-{}", st.uid));
        m["resourceVersion"] = json!(st.rv.to_string());
        m["generation"] = json!(1);
        m["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        Self::without_generation_if_hpa(obj);
    }

    /// HPAs carry no `metadata.generation` before Kubernetes 1.37 (the `HPAGeneration` gate):
    /// the fake serves them so, as the clusters the operator supports do.
    fn without_generation_if_hpa(obj: &mut Value) {
        if obj["kind"] == "HorizontalPodAutoscaler" {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("generation");
            }
        }
    }

    fn stamp_update(st: &mut State, old: &Value, obj: &mut Value) {
        st.rv += 1;
        let gen = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let changed = spec_part(old) != spec_part(obj);
        obj["metadata"]["generation"] = json!(if changed { gen + 1 } else { gen });
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        for k in ["uid", "creationTimestamp"] {
            if !old["metadata"][k].is_null() {
                obj["metadata"][k] = old["metadata"][k].clone();
            }
        }
        Self::without_generation_if_hpa(obj);
    }

    /// Store an object as a create would (stamping uid, generation, resourceVersion).
    pub fn insert(&self, collection: &str, mut obj: Value) -> Value {
        let name = obj["metadata"]["name"].as_str().expect("name").to_string();
        let ns = collection
            .split("/namespaces/")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .map(str::to_string);
        let mut st = self.state.lock().expect("fake state");
        Self::stamp_new(&mut st, &mut obj, &name, ns.as_deref());
        st.objects
            .insert((collection.to_string(), name), obj.clone());
        obj
    }

    /// Make every `method` request whose path contains `path_part` fail with `code`.
    pub fn fail(&self, method: &str, path_part: &str, code: u16) {
        self.state.lock().expect("fake state").failures.push((
            method.into(),
            path_part.into(),
            code,
        ));
    }

    /// Injected failures say which attempt they answer: a message that differs every time.
    pub fn vary_failure_messages(&self) {
        self.state.lock().expect("fake state").vary_failures = true;
    }

    /// Watches of `collection` opened from now on get every later write to it as a watch
    /// event (ADDED, MODIFIED, DELETED), as a real API server's would.
    pub fn stream_watches(&self, collection: &str) {
        self.state
            .lock()
            .expect("fake state")
            .streamed
            .push(collection.to_string());
    }

    /// The events of a new watch of `path`'s collection, when that collection is streamed.
    fn streamed_watch(
        &self,
        path: &str,
    ) -> Option<futures::channel::mpsc::UnboundedReceiver<Bytes>> {
        let (collection, _, _) = split_path(path);
        let mut st = self.state.lock().expect("fake state");
        if !st.streamed.contains(&collection) {
            return None;
        }
        let (tx, rx) = futures::channel::mpsc::unbounded();
        st.watchers.push((collection, tx));
        Some(rx)
    }

    /// Tell `collection`'s streamed watches that `obj` changed (after [`FakeApi::edit`] or
    /// [`FakeApi::insert`], which are not requests).
    pub fn announce(&self, collection: &str, obj: &Value) {
        self.notify("PUT", &format!("{collection}/x"), 200, obj);
    }

    /// Tell `collection`'s streamed watches that `obj` was deleted (after [`FakeApi::remove`]).
    pub fn notify_deleted(&self, collection: &str, obj: &Value) {
        self.notify("DELETE", &format!("{collection}/x"), 200, obj);
    }

    /// A write to `path` answered `code` with `obj`: a watch event for its collection's
    /// streamed watches.
    fn notify(&self, method: &str, path: &str, code: u16, obj: &Value) {
        let (collection, _, _) = split_path(path);
        let kind = match (method, code) {
            ("DELETE", _) => "DELETED",
            (_, 201) => "ADDED",
            _ => "MODIFIED",
        };
        let scaled;
        let obj = if obj["kind"] == "Scale" {
            // The API server announces the object scaled, not the Scale answer.
            let (_, name, _) = split_path(path);
            let st = self.state.lock().expect("fake state");
            match name.and_then(|n| st.objects.get(&(collection.clone(), n)).cloned()) {
                Some(o) => {
                    scaled = o;
                    &scaled
                }
                None => return,
            }
        } else {
            obj
        };
        if !obj["metadata"]["name"].is_string() {
            return; // a Status answer (a delete of a collection), not an object
        }
        let line = format!("{}\n", json!({"type": kind, "object": obj}));
        let mut st = self.state.lock().expect("fake state");
        st.watchers.retain(|(c, tx)| {
            *c != collection || tx.unbounded_send(Bytes::from(line.clone())).is_ok()
        });
    }

    /// Drop every failure injected by [`FakeApi::fail`] (the API server is back).
    pub fn heal(&self) {
        self.state.lock().expect("fake state").failures.clear();
    }

    /// Make every `method` request whose path contains `path_part` fail with `code` and `body`
    /// as text/html (not a Kubernetes Status), as a proxy's error page would.
    pub fn fail_with_body(&self, method: &str, path_part: &str, code: u16, body: &str) {
        self.state.lock().expect("fake state").raw_failures.push((
            method.into(),
            path_part.into(),
            code,
            body.into(),
        ));
    }

    fn raw_failure(&self, method: &str, path: &str) -> Option<(u16, String)> {
        self.state
            .lock()
            .expect("fake state")
            .raw_failures
            .iter()
            .find(|(m, p, _, _)| m == method && path.contains(p.as_str()))
            .map(|(_, _, c, b)| (*c, b.clone()))
    }

    /// Never answer a `method` request whose path contains `path_part` (it is not logged).
    pub fn hang(&self, method: &str, path_part: &str) {
        self.state
            .lock()
            .expect("fake state")
            .hangs
            .push((method.into(), path_part.into()));
    }

    /// Handle a `method` request whose path contains `path_part` only after `d` (a slow API
    /// server that then succeeds); replaces an earlier delay for the same request.
    pub fn delay(&self, method: &str, path_part: &str, d: std::time::Duration) {
        let mut st = self.state.lock().expect("fake state");
        st.delays
            .retain(|(m, p, _)| !(m == method && p == path_part));
        st.delays.push((method.into(), path_part.into(), d));
    }

    fn delay_of(&self, method: &str, path: &str) -> Option<std::time::Duration> {
        self.state
            .lock()
            .expect("fake state")
            .delays
            .iter()
            .find(|(m, p, _)| m == method && path.contains(p.as_str()))
            .map(|(_, _, d)| *d)
    }

    fn hangs_on(&self, method: &str, path: &str) -> bool {
        self.state
            .lock()
            .expect("fake state")
            .hangs
            .iter()
            .any(|(m, p)| m == method && path.contains(p.as_str()))
    }

    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .expect("fake state")
            .objects
            .get(&(collection.to_string(), name.to_string()))
            .cloned()
    }

    /// Overwrite an object's status (what a workload controller would report).
    pub fn set_status(&self, collection: &str, name: &str, status: Value) {
        let mut st = self.state.lock().expect("fake state");
        if let Some(o) = st
            .objects
            .get_mut(&(collection.to_string(), name.to_string()))
        {
            o["status"] = status;
        }
    }

    /// Edit an object in place (a user's `kubectl edit`), bumping its generation.
    pub fn edit(&self, collection: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut st = self.state.lock().expect("fake state");
        let key = (collection.to_string(), name.to_string());
        let Some(old) = st.objects.get(&key).cloned() else {
            panic!("edit: {collection}/{name} does not exist");
        };
        let mut obj = old.clone();
        f(&mut obj);
        Self::stamp_update(&mut st, &old, &mut obj);
        st.objects.insert(key, obj);
    }

    /// Delete an object directly (as the garbage collector or `kubectl delete` would); returns
    /// it.
    pub fn remove(&self, collection: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .expect("fake state")
            .objects
            .remove(&(collection.to_string(), name.to_string()))
    }

    pub fn names(&self, collection: &str) -> Vec<String> {
        self.state
            .lock()
            .expect("fake state")
            .objects
            .keys()
            .filter(|(c, _)| c == collection)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// What a workload controller reports once `n` pods run the latest spec, all ready.
    pub fn set_rolled_out(&self, collection: &str, name: &str, n: i32) {
        let gen = self.get(collection, name).expect("workload")["metadata"]["generation"].clone();
        self.set_status(
            collection,
            name,
            json!({"replicas": n, "readyReplicas": n, "updatedReplicas": n, "observedGeneration": gen}),
        );
    }

    /// The logged writes to children (see [`Logged::is_child_write`]).
    pub fn child_writes(&self) -> Vec<Logged> {
        self.log()
            .into_iter()
            .filter(|l| l.is_child_write())
            .collect()
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().expect("fake state").log.clone()
    }

    pub fn clear_log(&self) {
        self.state.lock().expect("fake state").log.clear();
    }

    /// Events stored (events.k8s.io objects), as (type, reason, note).
    pub fn events(&self) -> Vec<(String, String, String)> {
        let st = self.state.lock().expect("fake state");
        st.objects
            .iter()
            .filter(|((c, _), _)| c.contains("/events"))
            .map(|(_, v)| {
                (
                    v["type"].as_str().unwrap_or("").to_string(),
                    v["reason"].as_str().unwrap_or("").to_string(),
                    v["note"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every YAML document of a file under `examples/`.
pub fn example_docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("examples").join(file))
        .unwrap_or_else(|e| panic!("examples/{file}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The ContentServer documents of every file in `examples/`, as (file, raw JSON, typed).
pub fn example_contentservers() -> Vec<(String, Value, ContentServer)> {
    let mut files: Vec<String> = std::fs::read_dir(repo_root().join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for doc in example_docs(&f) {
            if doc["kind"] == "ContentServer" {
                let cs: ContentServer = serde_json::from_value(doc.clone())
                    .unwrap_or_else(|e| panic!("examples/{f}: not a valid ContentServer: {e}"));
                out.push((f.clone(), doc, cs));
            }
        }
    }
    assert!(
        out.len() >= 3,
        "expected at least 3 example ContentServers, found {}",
        out.len()
    );
    out
}

/// The reconcile context of the operator over the fake's client.
pub fn context(fake: &FakeApi) -> Arc<content_operator::reconcile::Context> {
    context_with(fake, content_operator::validation::Policy::default())
}

/// [`context`] with the operator's flags turned into `policy`.
pub fn context_with(
    fake: &FakeApi,
    policy: content_operator::validation::Policy,
) -> Arc<content_operator::reconcile::Context> {
    let client = fake.client();
    let reporter = kube::runtime::events::Reporter {
        controller: "content-operator".into(),
        instance: Some("test".into()),
    };
    Arc::new(content_operator::reconcile::Context::new(
        client,
        reporter,
        content_operator::metrics::Metrics::new(),
        policy,
    ))
}

/// Put an example's ContentServer into the fake (as `kubectl apply` would, the schema's
/// defaults applied by serde); returns its name.
pub fn create(fake: &FakeApi, file: &str) -> String {
    let doc = example_docs(file)
        .into_iter()
        .find(|d| d["kind"] == "ContentServer")
        .expect("ContentServer document");
    let typed: ContentServer = serde_json::from_value(doc).expect("ContentServer");
    let v = fake.insert(
        &contentservers(),
        serde_json::to_value(&typed).expect("json"),
    );
    v["metadata"]["name"].as_str().expect("name").to_string()
}

/// A ContentServer from one example file, with namespace and uid set (as the API returns it).
pub fn example(file: &str) -> ContentServer {
    let doc = example_docs(file)
        .into_iter()
        .find(|d| d["kind"] == "ContentServer")
        .unwrap_or_else(|| panic!("no ContentServer in examples/{file}"));
    let mut cs: ContentServer = serde_json::from_value(doc).expect("ContentServer");
    cs.metadata.namespace = Some(NS.into());
    cs.metadata.uid = Some(format!("uid-{file}"));
    cs.metadata.generation = Some(1);
    cs
}

/// Fails unless `validate` names every field in `want` (it may name others as well).
pub fn assert_invalid_fields(spec: &content_operator::crd::ContentServerSpec, want: &[&str]) {
    let fields: Vec<String> = content_operator::validation::validate(spec)
        .into_iter()
        .map(|e| e.field)
        .collect();
    for w in want {
        assert!(fields.iter().any(|f| f == w), "missing {w} in {fields:?}");
    }
}

/// The server config rendered from `spec` as the server reads it back (parsed, normalized and
/// accepted by its own validation).
pub fn rendered_back(
    spec: &content_operator::crd::ContentServerSpec,
) -> content_server::config::Config {
    let toml = content_operator::builders::configmap::render(spec)
        .expect("renders")
        .toml;
    let mut back = content_server::config::Config::from_toml(&toml).expect("server parses it");
    back.normalize();
    back.validate().expect("server accepts it");
    back
}

/// Fails when the config rendered from the ContentServer of `examples/<file>` holds any of
/// `absent` (options the example does not set must not be rendered).
pub fn assert_rendered_without(file: &str, absent: &[&str]) {
    let toml = content_operator::builders::configmap::render(&example(file).spec)
        .expect("renders")
        .toml;
    for a in absent {
        assert!(!toml.contains(a), "{a} in\n{toml}");
    }
}

/// Name of the ConfigMap the pods of workload `name` (Deployment or StatefulSet) mount: the
/// config of their template, named after its hash.
pub fn mounted_config_name(fake: &FakeApi, name: &str) -> String {
    let workload = fake
        .get(&deployments(), name)
        .or_else(|| fake.get(&statefulsets(), name))
        .unwrap_or_else(|| panic!("no workload {name}"));
    workload["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("pod volumes")
        .iter()
        .find(|v| v["name"] == "config")
        .and_then(|v| v["configMap"]["name"].as_str())
        .expect("config volume from a ConfigMap")
        .to_string()
}

/// The ConfigMap the pods of workload `name` mount ([`mounted_config_name`]).
pub fn mounted_config(fake: &FakeApi, name: &str) -> Value {
    let cm = mounted_config_name(fake, name);
    fake.get(&configmaps(), &cm)
        .unwrap_or_else(|| panic!("the mounted ConfigMap {cm} exists"))
}

/// The config ConfigMaps of ContentServer `name` (named `NAME-config-HASH`).
pub fn config_names(fake: &FakeApi, name: &str) -> Vec<String> {
    let prefix = format!("{name}-config-");
    fake.names(&configmaps())
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}
