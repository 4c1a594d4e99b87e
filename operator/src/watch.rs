//! The stream of ContentServers the controller reconciles: watched as the API server stores
//! them (untyped) and decoded one object at a time, so that one object the typed
//! `ContentServer` cannot hold (stored under an older CRD, or with a CRD installed by hand
//! without its schema) is reported on its own (a warning naming the object and the field, and a
//! Warning Event on it) while every other ContentServer keeps being reconciled. A typed watch
//! decodes a LIST as a whole: one such object would stop them all.
//!
//! Also which events of owned HPAs call for a reconcile ([`hpa_triggers`]).
//!
//! Owns the decoding and the store of decoded objects; must not reconcile anything.

use crate::crd::ContentServer;
use futures::{Stream, StreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;

/// Longest error text logged for a failed LIST or WATCH or an object that does not decode.
pub const MAX_ERROR_LEN: usize = 300;

/// An error's text cut to [`MAX_ERROR_LEN`] characters (a decode error quotes the response).
pub fn brief(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    match text.char_indices().nth(MAX_ERROR_LEN) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// The Event reason on a ContentServer that does not decode.
pub const UNDECODABLE_REASON: &str = "InvalidObject";

/// What a ContentServer's stored JSON fails on: the field's path and serde's message, e.g.
/// `spec.replicas: invalid value: integer `3000000000`, expected i32`.
pub fn decode(obj: &DynamicObject) -> Result<ContentServer, String> {
    let value = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize::<_, ContentServer>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })
}

/// The ContentServers of `api`'s scope, decoded one by one, kept in the returned store; the
/// stream yields each one applied (what the controller's trigger wants).
pub fn contentservers(
    api: Api<DynamicObject>,
    config: watcher::Config,
    recorder: Recorder,
) -> (
    impl Stream<Item = Result<ContentServer, watcher::Error>> + Send + 'static,
    Store<ContentServer>,
) {
    let (reader, writer) = reflector::store();
    let known = reader.clone();
    let decoded = watcher(api, config).filter_map(move |ev| {
        let known = known.clone();
        let recorder = recorder.clone();
        async move {
            match ev {
                Ok(ev) => typed(ev, &known, &recorder).await.map(Ok),
                Err(e) => Some(Err(e)),
            }
        }
    });
    let stream = reflector::reflector(writer, decoded).applied_objects();
    (stream, reader)
}

/// One watch event with its object decoded; None drops an event whose object does not decode
/// (reported). Such an object's earlier version, if one decoded, stays in the store (a relist
/// lists it again) and keeps being reconciled as it was; its deletion still removes it.
async fn typed(
    ev: watcher::Event<DynamicObject>,
    known: &Store<ContentServer>,
    recorder: &Recorder,
) -> Option<watcher::Event<ContentServer>> {
    use watcher::Event::*;
    Some(match ev {
        Init => Init,
        InitDone => InitDone,
        Apply(o) => Apply(reported(o, recorder).await?),
        // A relist rebuilds the store from these alone: an object that no longer decodes is
        // listed as the version known before, or it would drop out (no longer reconciled, its
        // deletion lost).
        InitApply(o) => {
            let (key, uid) = (key_of(&o), o.metadata.uid.clone());
            match reported(o, recorder).await {
                Some(cs) => InitApply(cs),
                // The same object only: one deleted and made again under its name is not it.
                None => InitApply(
                    known
                        .get(&key)
                        .filter(|cs| cs.metadata.uid == uid)
                        .map(|cs| (*cs).clone())?,
                ),
            }
        }
        Delete(o) => match decode(&o) {
            Ok(cs) => Delete(cs),
            Err(_) => Delete(known.get(&key_of(&o)).map(|cs| (*cs).clone())?),
        },
    })
}

fn key_of(o: &DynamicObject) -> ObjectRef<ContentServer> {
    ObjectRef::new(&o.name_any()).within(&o.namespace().unwrap_or_default())
}

/// The decoded object, or None after a warning and a Warning Event on it.
async fn reported(obj: DynamicObject, recorder: &Recorder) -> Option<ContentServer> {
    match decode(&obj) {
        Ok(cs) => Some(cs),
        Err(why) => {
            let name = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
            let why = brief(&why);
            tracing::warn!(contentserver = %name, error = %why, "ContentServer does not decode; not reconciled until it is fixed (the others are)");
            let ev = Event {
                type_: EventType::Warning,
                reason: UNDECODABLE_REASON.into(),
                note: Some(format!(
                    "the operator cannot read this object, so it is not reconciled: {why}"
                )),
                action: "Decode".into(),
                secondary: None,
            };
            let reference = obj.object_ref(&ApiResource::erase::<ContentServer>(&()));
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::warn!(contentserver = %name, error = %e, "cannot publish event");
            }
            None
        }
    }
}

/// The owned HPAs' events that call for a reconcile: a new one, a spec that changed (someone
/// edited it: the operator puts its own back) and a deletion (it is made again). Not the
/// autoscaler's status syncs, which change it every 15 s under load: each would run a whole
/// reconcile. Compared by the spec itself, not `metadata.generation`, which HPAs carry only
/// from Kubernetes 1.37 (the `HPAGeneration` gate); a deletion passes whatever it holds.
pub fn hpa_triggers(
    api: Api<HorizontalPodAutoscaler>,
    config: watcher::Config,
) -> impl Stream<Item = Result<HorizontalPodAutoscaler, watcher::Error>> + Send + 'static {
    let mut specs: HashMap<String, u64> = HashMap::new();
    watcher(api, config).filter_map(move |ev| {
        let key =
            |h: &HorizontalPodAutoscaler| h.metadata.uid.clone().unwrap_or_else(|| h.name_any());
        let out = match ev {
            Ok(watcher::Event::Apply(h) | watcher::Event::InitApply(h)) => {
                let spec = spec_hash(&h);
                (specs.insert(key(&h), spec) != Some(spec)).then_some(Ok(h))
            }
            Ok(watcher::Event::Delete(h)) => {
                specs.remove(&key(&h));
                Some(Ok(h))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(out)
    })
}

/// A hash of an HPA's spec (its JSON: the fields as the API server stores them).
fn spec_hash(h: &HorizontalPodAutoscaler) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&h.spec)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::Reporter;

    /// A client whose API answers 404 to everything (the Events the decoding reports).
    fn client() -> kube::Client {
        let svc = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            http::Response::builder()
                .status(404)
                .body(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
        });
        kube::Client::new(svc, "default")
    }

    fn minimal() -> DynamicObject {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/minimal.yaml");
        let text = std::fs::read_to_string(path).expect("examples/minimal.yaml");
        let mut obj: DynamicObject = serde_yaml_ng::from_str(&text).expect("a ContentServer");
        obj.metadata.namespace = Some("default".into());
        obj.metadata.uid = Some("uid-1".into());
        obj
    }

    /// A relist rebuilds the store from its InitApply events alone: an object that stopped
    /// decoding is listed as the version known before (still reconciled, its deletion still
    /// seen); one never decoded is dropped.
    #[tokio::test]
    async fn a_relisted_object_that_no_longer_decodes_keeps_its_known_version() {
        let reporter = Reporter {
            controller: "test".into(),
            instance: None,
        };
        let recorder = Recorder::new(client(), reporter);
        let (known, mut writer) = reflector::store::<ContentServer>();
        let good = minimal();
        let cs = decode(&good).expect("decodes");
        writer.apply_watcher_event(&watcher::Event::Apply(cs.clone()));
        let mut bad = good.clone();
        bad.data["spec"]["replicas"] = serde_json::json!(3_000_000_000_i64);
        match typed(watcher::Event::InitApply(bad.clone()), &known, &recorder).await {
            Some(watcher::Event::InitApply(listed)) => {
                assert_eq!(listed.spec.replicas, cs.spec.replicas)
            }
            _ => panic!("the known version was not listed"),
        }
        // Deleted and made again under the same name (another uid): not the known one.
        let mut other = bad.clone();
        other.metadata.uid = Some("uid-2".into());
        assert!(typed(watcher::Event::InitApply(other), &known, &recorder)
            .await
            .is_none());
        bad.metadata.name = Some("never-decoded".into());
        assert!(typed(watcher::Event::InitApply(bad), &known, &recorder)
            .await
            .is_none());
    }
}
