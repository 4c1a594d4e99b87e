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
    let mut triggers = HpaTriggers::default();
    watcher(api, config).flat_map(move |ev| {
        let out: Vec<_> = match ev {
            Ok(ev) => triggers.on(ev).into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(out)
    })
}

/// What [`hpa_triggers`] remembers: each known HPA (by uid) with its spec's hash, and during a
/// relist the uids listed so far, so that one deleted while the watch was down (no Delete event
/// comes for it) still triggers its owner, and is forgotten.
#[derive(Default)]
struct HpaTriggers {
    known: HashMap<String, (u64, HorizontalPodAutoscaler)>,
    relisted: Option<std::collections::HashSet<String>>,
}

impl HpaTriggers {
    /// The HPAs whose owners this event calls to reconcile.
    fn on(&mut self, ev: watcher::Event<HorizontalPodAutoscaler>) -> Vec<HorizontalPodAutoscaler> {
        let key =
            |h: &HorizontalPodAutoscaler| h.metadata.uid.clone().unwrap_or_else(|| h.name_any());
        match ev {
            watcher::Event::Init => {
                self.relisted = Some(Default::default());
                Vec::new()
            }
            watcher::Event::InitApply(h) | watcher::Event::Apply(h) => {
                let k = key(&h);
                if let Some(seen) = self.relisted.as_mut() {
                    seen.insert(k.clone());
                }
                let spec = spec_hash(&h);
                let changed = self.known.get(&k).map(|(s, _)| *s) != Some(spec);
                self.known.insert(k, (spec, h.clone()));
                if changed {
                    vec![h]
                } else {
                    Vec::new()
                }
            }
            watcher::Event::InitDone => {
                let seen = self.relisted.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .known
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                gone.iter()
                    .filter_map(|k| self.known.remove(k).map(|(_, h)| h))
                    .collect()
            }
            watcher::Event::Delete(h) => {
                self.known.remove(&key(&h));
                vec![h]
            }
        }
    }
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

    fn hpa(uid: &str, max: i32, current: i32) -> HorizontalPodAutoscaler {
        let mut h = HorizontalPodAutoscaler::default();
        h.metadata.name = Some(format!("hpa-{uid}"));
        h.metadata.uid = Some(uid.into());
        h.spec = Some(
            k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerSpec {
                max_replicas: max,
                ..Default::default()
            },
        );
        h.status = Some(
            k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerStatus {
                current_replicas: Some(current),
                ..Default::default()
            },
        );
        h
    }

    fn uids(hs: Vec<HorizontalPodAutoscaler>) -> Vec<String> {
        let mut u: Vec<String> = hs.into_iter().filter_map(|h| h.metadata.uid).collect();
        u.sort();
        u
    }

    /// New HPAs, spec changes and deletions trigger, status syncs do not; an HPA gone while the
    /// watch was down (a relist without it) triggers at the relist's end and is forgotten.
    #[test]
    fn hpa_triggers_follow_the_spec_and_deletions_also_across_relists() {
        use watcher::Event::*;
        let mut t = HpaTriggers::default();
        assert!(t.on(Init).is_empty());
        assert_eq!(uids(t.on(InitApply(hpa("a", 5, 1)))), ["a"]);
        assert_eq!(uids(t.on(InitApply(hpa("b", 5, 1)))), ["b"]);
        assert!(t.on(InitDone).is_empty());
        // The autoscaler's syncs: status only.
        assert!(t.on(Apply(hpa("a", 5, 2))).is_empty());
        assert!(t.on(Apply(hpa("a", 5, 3))).is_empty());
        // An edit of the spec, then the operator's own spec back: both trigger.
        assert_eq!(uids(t.on(Apply(hpa("a", 99, 3)))), ["a"]);
        assert_eq!(uids(t.on(Apply(hpa("a", 5, 3)))), ["a"]);
        // A relist where b is missing (deleted while the watch was down) and a unchanged.
        assert!(t.on(Init).is_empty());
        assert!(t.on(InitApply(hpa("a", 5, 4))).is_empty());
        assert_eq!(uids(t.on(InitDone)), ["b"]);
        assert_eq!(t.known.len(), 1);
        assert_eq!(uids(t.on(Delete(hpa("a", 5, 4)))), ["a"]);
        assert!(t.known.is_empty());
    }

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
