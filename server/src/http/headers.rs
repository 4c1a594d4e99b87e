//! Which configured response headers (`Cache-Control`, `Expires`, `add`) a response gets.
//! Layers, later wins field by field (and per header name for `add`): the route's `headers`,
//! then the global `http.media_headers` entry matching the file, then the route's own
//! `media_headers` entry. Within a media table the most specific key matches: the extension,
//! then the exact media type, then `type/*`. Compiled once at start; pure.

use crate::config::{Config, HeaderRule};
use std::collections::HashMap;

/// A media-keyed table, with keys lower-cased and split by kind.
#[derive(Debug, Clone, Default)]
struct MediaTable {
    by_ext: HashMap<String, HeaderRule>,
    by_type: HashMap<String, HeaderRule>,
    by_major: HashMap<String, HeaderRule>,
}

impl MediaTable {
    fn new<'a>(m: impl IntoIterator<Item = (&'a String, &'a HeaderRule)>) -> MediaTable {
        let mut t = MediaTable::default();
        for (k, r) in m {
            let k = k.to_ascii_lowercase();
            match k.split_once('/') {
                Some((major, "*")) => t.by_major.insert(major.to_string(), r.clone()),
                Some(_) => t.by_type.insert(k, r.clone()),
                None => t.by_ext.insert(k, r.clone()),
            };
        }
        t
    }

    fn is_empty(&self) -> bool {
        self.by_ext.is_empty() && self.by_type.is_empty() && self.by_major.is_empty()
    }

    fn lookup(&self, ext: Option<&str>, essence: &str) -> Option<&HeaderRule> {
        if self.is_empty() {
            return None;
        }
        ext.and_then(|e| self.by_ext.get(e))
            .or_else(|| self.by_type.get(essence))
            .or_else(|| {
                essence
                    .split_once('/')
                    .and_then(|(major, _)| self.by_major.get(major))
            })
    }
}

#[derive(Debug, Clone, Default)]
struct RouteRules {
    base: HeaderRule,
    media: MediaTable,
    /// Whether any rule (the route's own or a global media one) may apply: false = every
    /// response of the route gets no configured header, known without a lookup.
    any: bool,
}

fn rule_is_empty(r: &HeaderRule) -> bool {
    r.cache_control.is_none() && r.expires_secs.is_none() && r.add.is_empty()
}

/// Configured headers for every route (indexed like `Config::routes`).
#[derive(Debug, Clone, Default)]
pub struct HeaderPolicy {
    global: MediaTable,
    routes: Vec<RouteRules>,
}

/// The headers one response gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effective {
    pub cache_control: Option<String>,
    pub expires_secs: Option<u64>,
    /// In the order configured, names as written.
    pub add: Vec<(String, String)>,
}

impl Effective {
    fn apply(&mut self, r: &HeaderRule) {
        if let Some(cc) = &r.cache_control {
            self.cache_control = Some(cc.clone());
        }
        if let Some(s) = r.expires_secs {
            self.expires_secs = Some(s);
        }
        for (name, value) in &r.add {
            match self
                .add
                .iter_mut()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                Some(slot) => slot.1 = value.clone(),
                None => self.add.push((name.clone(), value.clone())),
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.cache_control.is_none() && self.expires_secs.is_none() && self.add.is_empty()
    }

    /// The header lines, with `Expires` computed from `now` (seconds since the epoch).
    pub fn lines(&self, now: i64) -> Vec<(&str, String)> {
        let mut out = Vec::with_capacity(2 + self.add.len());
        if let Some(cc) = &self.cache_control {
            out.push(("Cache-Control", cc.clone()));
        }
        if let Some(s) = self.expires_secs {
            let at = now.saturating_add(i64::try_from(s).unwrap_or(i64::MAX));
            out.push(("Expires", super::date::format(at)));
        }
        for (n, v) in &self.add {
            out.push((n.as_str(), v.clone()));
        }
        out
    }
}

/// `text/html; charset=utf-8` -> `text/html` (borrowed unless it has upper case).
fn essence(content_type: &str) -> std::borrow::Cow<'_, str> {
    let e = content_type.split(';').next().unwrap_or("").trim();
    if e.bytes().any(|b| b.is_ascii_uppercase()) {
        e.to_ascii_lowercase().into()
    } else {
        e.into()
    }
}

impl HeaderPolicy {
    pub fn new(cfg: &Config) -> HeaderPolicy {
        let global = MediaTable::new(&cfg.http.media_headers);
        let routes = cfg
            .routes
            .iter()
            .map(|r| {
                let (base, media) = (
                    r.http.headers.clone(),
                    MediaTable::new(&r.http.media_headers),
                );
                let any = !rule_is_empty(&base) || !media.is_empty() || !global.is_empty();
                RouteRules { base, media, any }
            })
            .collect();
        HeaderPolicy { global, routes }
    }

    /// Whether [`HeaderPolicy::for_response`] may return anything for `route` (false: it is
    /// empty whatever the file, so the caller can skip it).
    pub fn applies(&self, route: Option<usize>) -> bool {
        match route.and_then(|i| self.routes.get(i)) {
            Some(r) => r.any,
            None => !self.global.is_empty(),
        }
    }

    /// The headers for a file of route `route` (None: no route, e.g. a redirect computed before
    /// routing) with lower-cased extension `ext` and Content-Type `content_type` (None: not a
    /// file, e.g. a redirect: only the route's `headers` apply).
    pub fn for_response(
        &self,
        route: Option<usize>,
        ext: Option<&str>,
        content_type: Option<&str>,
    ) -> Effective {
        let mut eff = Effective::default();
        let r = route.and_then(|i| self.routes.get(i));
        if let Some(r) = r {
            eff.apply(&r.base);
        }
        if let Some(ct) = content_type {
            let ess = essence(ct);
            if let Some(g) = self.global.lookup(ext, &ess) {
                eff.apply(g);
            }
            if let Some(m) = r.and_then(|r| r.media.lookup(ext, &ess)) {
                eff.apply(m);
            }
        }
        eff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        let mut c = Config::from_toml(
            r#"
[http.media_headers.m4s]
cache_control = "public, max-age=31536000, immutable"
[http.media_headers."application/vnd.apple.mpegurl"]
cache_control = "max-age=2"
[http.media_headers."video/*"]
cache_control = "public, max-age=86400"
expires_secs = 86400
[http.media_headers."text/html"]
cache_control = "no-cache"

[[volumes]]
name = "a"
path = "/a"

[[routes]]
prefix = "/"
volume = "a"

[[routes]]
prefix = "/live"
volume = "a"
[routes.http.headers]
add = { "X-Content-Type-Options" = "nosniff", "X-Frame-Options" = "DENY" }
cache_control = "max-age=60"
[routes.http.media_headers.m3u8]
cache_control = "max-age=1"
add = { "x-frame-options" = "SAMEORIGIN" }
"#,
        )
        .expect("parses");
        c.normalize();
        c.validate().expect("valid");
        c
    }

    #[test]
    fn most_specific_key_and_layer_win() {
        let p = HeaderPolicy::new(&cfg());
        let seg = p.for_response(Some(0), Some("m4s"), Some("video/iso.segment"));
        assert_eq!(
            seg.cache_control.as_deref(),
            Some("public, max-age=31536000, immutable")
        );
        assert_eq!(
            seg.expires_secs, None,
            "the extension entry wins over video/*"
        );
        let ts = p.for_response(Some(0), Some("ts"), Some("video/mp2t"));
        assert_eq!(ts.cache_control.as_deref(), Some("public, max-age=86400"));
        assert_eq!(ts.expires_secs, Some(86400));
        let m3u8 = p.for_response(Some(0), Some("m3u8"), Some("application/vnd.apple.mpegurl"));
        assert_eq!(m3u8.cache_control.as_deref(), Some("max-age=2"));
        let html = p.for_response(Some(0), Some("html"), Some("text/html; charset=utf-8"));
        assert_eq!(html.cache_control.as_deref(), Some("no-cache"));
        let other = p.for_response(Some(0), Some("bin"), Some("application/octet-stream"));
        assert!(other.is_empty());
        // Route layer: base, then global media, then the route's media entry.
        let live = p.for_response(Some(1), Some("m3u8"), Some("application/vnd.apple.mpegurl"));
        assert_eq!(live.cache_control.as_deref(), Some("max-age=1"));
        assert_eq!(
            live.add,
            vec![
                ("X-Content-Type-Options".to_string(), "nosniff".to_string()),
                ("X-Frame-Options".to_string(), "SAMEORIGIN".to_string())
            ]
        );
        let live_seg = p.for_response(Some(1), Some("m4s"), Some("video/iso.segment"));
        assert_eq!(
            live_seg.cache_control.as_deref(),
            Some("public, max-age=31536000, immutable")
        );
        let live_bin = p.for_response(Some(1), None, Some("application/octet-stream"));
        assert_eq!(live_bin.cache_control.as_deref(), Some("max-age=60"));
        // A redirect: the route's headers only.
        let redirect = p.for_response(Some(1), None, None);
        assert_eq!(redirect.cache_control.as_deref(), Some("max-age=60"));
        assert!(p.for_response(None, Some("m4s"), None).is_empty());
    }

    #[test]
    fn lines_render_expires_from_now() {
        let e = Effective {
            cache_control: Some("max-age=2".into()),
            expires_secs: Some(60),
            add: vec![("X-A".into(), "1".into())],
        };
        assert_eq!(
            e.lines(784_111_777),
            vec![
                ("Cache-Control", "max-age=2".to_string()),
                ("Expires", "Sun, 06 Nov 1994 08:50:37 GMT".to_string()),
                ("X-A", "1".to_string()),
            ]
        );
    }
}
