//! Semantic checks of a parsed [`Config`]: every problem is reported with the field path that
//! holds it (`volumes[1].pool.threads`) and what is wrong. Pure: no filesystem access, so the
//! operator can run the same checks on a ContentServer before rendering it.

use super::errors::{check_unique_name, has_nul, ConfigError, Errors, FieldError};
use super::listen::ListenIp;
use super::{Config, Route};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

/// Largest connection-side duration: `limits.*_timeout_secs`, `limits.idle_park_ms`,
/// `shutdown_timeout_secs` (one day). Cache lifetimes have their own bound
/// ([`super::cache::MAX_LIFETIME_SECS`]); every other duration field has a smaller one.
pub const MAX_TIMEOUT_SECS: u64 = 86_400;

impl Config {
    /// Check every semantic rule; all violations are returned together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let errors = self.field_errors();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(errors))
        }
    }

    /// The violations as a list (empty when valid).
    pub fn field_errors(&self) -> Vec<FieldError> {
        let mut e = Errors(Vec::new());
        if self.listeners.is_empty() {
            e.push("listeners", "at least one listener is required");
        }
        let mut seen_sockets = HashSet::new();
        for (i, l) in self.listeners.iter().enumerate() {
            match l.address.parse::<ListenIp>() {
                Err(_) => e.push(
                    format!("listeners[{i}].address"),
                    format!(
                        "{:?} is not an IP address (or * for every IPv4 and IPv6 address)",
                        l.address
                    ),
                ),
                Ok(ip) => {
                    if let Some(v4) = ip.mapped_v4() {
                        e.push(
                            format!("listeners[{i}].address"),
                            format!("{:?} {}", l.address, ListenIp::mapped_v4_error(v4)),
                        );
                    }
                }
            }
            if l.backlog == 0 {
                e.push(format!("listeners[{i}].backlog"), "must be at least 1");
            }
            if l.defer_accept_secs > 3600 {
                e.push(
                    format!("listeners[{i}].defer_accept_secs"),
                    "must be at most 3600",
                );
            }
            if l.notsent_lowat_bytes != 0 && !(16384..=1 << 30).contains(&l.notsent_lowat_bytes) {
                e.push(
                    format!("listeners[{i}].notsent_lowat_bytes"),
                    "must be 0 (the kernel's default) or between 16384 and 1073741824",
                );
            }
            if let Some(cc) = &l.congestion_control {
                if !is_congestion_control_name(cc) {
                    e.push(
                        format!("listeners[{i}].congestion_control"),
                        format!("{cc:?} is not a kernel congestion control name (1-15 of a-z, 0-9 and _, such as \"cubic\" or \"bbr\"; leave it out for the host's default)"),
                    );
                }
            }
            // One address written two ways (`::1`, `0:0:0:0:0:0:0:1`) is one socket.
            let address = l
                .address
                .parse::<std::net::IpAddr>()
                .map_or_else(|_| l.address.clone(), |a| a.to_string());
            if !seen_sockets.insert((address, l.port)) {
                e.push(
                    format!("listeners[{i}]"),
                    format!("{} is listed twice", written(&l.address, l.port)),
                );
            } else if let Some(j) = self.listeners[..i].iter().position(|o| {
                l.port != 0 && o.port == l.port && addresses_clash(&o.address, &l.address)
            }) {
                let o = &self.listeners[j];
                e.push(
                    format!("listeners[{i}]"),
                    format!(
                        "{} overlaps listeners[{j}] ({}): an unspecified address (0.0.0.0, ::) takes the port on every address of its family, * on every address",
                        written(&l.address, l.port),
                        written(&o.address, o.port)
                    ),
                );
            }
        }
        if self.workers > 1024 {
            e.push("workers", "must be at most 1024 (0 = one per CPU core)");
        }
        let lim = &self.limits;
        if lim.max_connections == 0 {
            e.push("limits.max_connections", "must be at least 1");
        }
        for (field, secs) in [
            ("limits.keepalive_timeout_secs", lim.keepalive_timeout_secs),
            (
                "limits.header_read_timeout_secs",
                lim.header_read_timeout_secs,
            ),
            ("limits.send_timeout_secs", lim.send_timeout_secs),
        ] {
            if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
                e.push(
                    field,
                    format!("{secs} must be between 1 and {MAX_TIMEOUT_SECS} (one day)"),
                );
            }
        }
        if lim.idle_park_ms > MAX_TIMEOUT_SECS * 1000 {
            e.push(
                "limits.idle_park_ms",
                format!(
                    "{} must be at most {} (one day; 0 = never park)",
                    lim.idle_park_ms,
                    MAX_TIMEOUT_SECS * 1000
                ),
            );
        }
        if self.shutdown_timeout_secs > MAX_TIMEOUT_SECS {
            e.push(
                "shutdown_timeout_secs",
                format!(
                    "{} must be at most {MAX_TIMEOUT_SECS} (one day)",
                    self.shutdown_timeout_secs
                ),
            );
        }
        if !(256..=1024 * 1024).contains(&lim.max_header_bytes) {
            e.push(
                "limits.max_header_bytes",
                "must be between 256 and 1048576 bytes",
            );
        }
        if !(4096..=1 << 30).contains(&lim.sendfile_max_chunk) {
            e.push(
                "limits.sendfile_max_chunk",
                "must be between 4096 bytes and 1 GiB",
            );
        }
        if self.open_file_cache.max_entries > 1_000_000 {
            e.push("open_file_cache.max_entries", "must be at most 1000000");
        }
        if self.open_file_cache.valid_ms > 86_400_000 {
            e.push(
                "open_file_cache.valid_ms",
                "must be at most 86400000 (one day)",
            );
        }
        for (i, name) in self.http.index.iter().enumerate() {
            if name.is_empty()
                || name.contains('/')
                || name.contains('\0')
                || name == "."
                || name == ".."
            {
                e.push(
                    format!("http.index[{i}]"),
                    format!("{name:?} must be a plain file name (no '/', no NUL byte)"),
                );
            }
        }
        if self.http.max_ranges > 1024 {
            e.push("http.max_ranges", "must be at most 1024");
        }
        if !(1..=100_000).contains(&self.http.listing_max_entries) {
            e.push("http.listing_max_entries", "must be between 1 and 100000");
        }
        super::media::check(&mut e, "http.media_types", &self.http.media_types);
        super::headers::check_media_headers(&mut e, "http.media_headers", &self.http.media_headers);
        match super::listen::parse_socket(&self.admin.listen) {
            _ if self.admin.listen.is_empty() => {}
            None => e.push(
                "admin.listen",
                format!(
                    "{:?} is not ADDR:PORT, [V6]:PORT or *:PORT with the port 0-65535 in plain digits (empty disables the admin listener)",
                    self.admin.listen
                ),
            ),
            Some((ip, port)) if ip.mapped_v4().is_some() => e.push(
                "admin.listen",
                format!(
                    "{:?} {}",
                    self.admin.listen,
                    ip.mapped_v4().map_or_else(String::new, |v4| {
                        ListenIp::mapped_v4_error(ListenIp::Ip(v4.into()).with_port(port))
                    })
                ),
            ),
            // The same port on an address a listener also takes (0.0.0.0 takes every one).
            Some((ip, port)) if port != 0 => {
                let overlaps = |l: &super::Listener| {
                    l.port == port && l.address.parse().is_ok_and(|a: ListenIp| a.clashes(ip))
                };
                if let Some(i) = self.listeners.iter().position(overlaps) {
                    e.push(
                        "admin.listen",
                        format!(
                            "{} is also listeners[{i}]'s port: give the admin listener a port of its own",
                            self.admin.listen
                        ),
                    );
                }
            }
            Some(_) => {}
        }
        self.check_purge_token_file(&mut e);
        if let Err(msg) = check_log_level(&self.logging.level) {
            e.push("logging.level", msg);
        }
        let origins = super::origin::check_origins(&mut e, self);
        super::cache::check_volume_caches(&mut e, self);
        if self.volumes.is_empty() {
            e.push("volumes", "at least one volume is required");
        }
        let mut names = HashSet::new();
        for (i, v) in self.volumes.iter().enumerate() {
            let f = format!("volumes[{i}]");
            check_unique_name(&mut e, &f, "volume", &v.name, &mut names);
            if has_nul(&v.path) {
                e.push(
                    format!("{f}.path"),
                    format!("{:?} contains a NUL byte: no file system path can", v.path),
                );
            } else if !v.path.is_absolute() {
                e.push(
                    format!("{f}.path"),
                    format!("{:?} must be an absolute path", v.path),
                );
            }
            if v.pool.threads == 0 || v.pool.threads > 4096 {
                e.push(format!("{f}.pool.threads"), "must be between 1 and 4096");
            }
            if v.pool.max_queue > 16 * 1024 * 1024 {
                e.push(format!("{f}.pool.max_queue"), "must be at most 16777216");
            }
        }
        let lexical: Vec<Option<PathBuf>> = self
            .volumes
            .iter()
            .map(|v| v.path.is_absolute().then(|| lexically_normal(&v.path)))
            .collect();
        e.0.extend(self.volume_dir_conflicts(&lexical, false));
        if let ([v], true) = (self.volumes.as_slice(), self.routes.is_empty()) {
            // Only a cache volume without exactly one origin is left without the implicit
            // route by `normalize`.
            if v.cache.is_some() {
                e.push(
                    "routes",
                    format!(
                        "no [[routes]], and the implicit \"/\" route to cache volume {:?} has no origin (it takes the origin only when exactly one [[origins]] is defined; there are {}): add a [[routes]] with prefix, volume = {:?} and origin naming one of [[origins]]",
                        v.name,
                        self.origins.len(),
                        v.name
                    ),
                );
            }
        }
        if self.routes.is_empty() && self.volumes.len() > 1 {
            e.push(
                "routes",
                "with more than one volume, routes must say which prefix each volume serves",
            );
        }
        // Prefix as matched (a trailing `/` is ignored) -> the first route with it.
        let mut prefixes: HashMap<&str, usize> = HashMap::new();
        for (i, r) in self.routes.iter().enumerate() {
            check_route(&mut e, i, r, &names);
            super::route_http::check(&mut e, &format!("routes[{i}].http"), &r.http);
            super::cache::check_cache_route(&mut e, i, r, self, &origins);
            match prefixes.entry(r.prefix.trim_end_matches('/')) {
                Entry::Vacant(v) => {
                    v.insert(i);
                }
                Entry::Occupied(o) => {
                    let first = *o.get();
                    let same = if self.routes[first].prefix == r.prefix {
                        String::new()
                    } else {
                        " (a trailing '/' is ignored)".into()
                    };
                    e.push(
                        format!("routes[{i}].prefix"),
                        format!(
                            "{:?} is the same prefix as routes[{first}].prefix {:?}{same}: each prefix may be routed once",
                            r.prefix, self.routes[first].prefix
                        ),
                    );
                }
            }
        }
        e.0
    }
}

impl Config {
    /// `admin.purge_token_file`: empty (purging off), or an absolute path, used by a purge
    /// endpoint that exists (an admin listener and a cache volume). A setting that would do
    /// nothing is refused, as `ca_file` without https servers is: blank (`"   "` was "off" at
    /// serve while check-config kept it), relative (read against the working directory of
    /// whoever started the server), with a NUL byte, with no cache volume to purge, or with the
    /// admin listener off. Pure: the file's content is checked when the server starts.
    fn check_purge_token_file(&self, e: &mut Errors) {
        let f = "admin.purge_token_file";
        let file = self.admin.purge_token_file.as_str();
        if file.is_empty() {
            return;
        }
        if file.trim().is_empty() {
            e.push(
                f,
                format!("{file:?} is blank: leave it out (or \"\") to turn purging off, or name the token file"),
            );
            return;
        }
        if file.contains('\0') {
            e.push(
                f,
                format!("{file:?} contains a NUL byte: no file system path can"),
            );
        } else if !Path::new(file).is_absolute() {
            e.push(f, format!("{file:?} must be an absolute path"));
        }
        if !self.volumes.iter().any(|v| v.cache.is_some()) {
            e.push(
                f,
                "POST /cache/purge deletes cached objects, and no volume has [volumes.cache]: leave it out",
            );
        }
        if self.admin.listen.is_empty() {
            e.push(
                f,
                "POST /cache/purge is served on the admin listener, which admin.listen = \"\" turns off: set admin.listen or leave the token file out",
            );
        }
    }

    /// Volumes whose directories collide, judged on `dirs` (one per volume, in order; `None` is
    /// skipped): two directories that are the same or one inside the other, where either is a
    /// cache volume. A cache directory inside a static root would have its raw entry files
    /// (stored headers included) served by the static route; one shared by two cache volumes
    /// would have each delete the other's entries. Static volumes may share or nest roots (they
    /// only read). Validation passes the lexically normal paths; `serve` also passes the
    /// canonical ones (`resolved`, symlinks followed), so the message shows both.
    pub fn volume_dir_conflicts(
        &self,
        dirs: &[Option<PathBuf>],
        resolved: bool,
    ) -> Vec<FieldError> {
        let mut e = Errors(Vec::new());
        let shown = |i: usize, d: &Path| {
            let raw = &self.volumes[i].path;
            if resolved && d != raw.as_path() {
                format!("{} (resolved to {})", raw.display(), d.display())
            } else {
                raw.display().to_string()
            }
        };
        for (j, vj) in self.volumes.iter().enumerate() {
            let Some(dj) = dirs.get(j).and_then(Option::as_ref) else {
                continue;
            };
            for (i, vi) in self.volumes.iter().enumerate().take(j) {
                let Some(di) = dirs.get(i).and_then(Option::as_ref) else {
                    continue;
                };
                if vi.cache.is_none() && vj.cache.is_none() {
                    continue;
                }
                let relation = if di == dj {
                    "is the same directory as"
                } else if dj.starts_with(di) {
                    "lies inside"
                } else if di.starts_with(dj) {
                    "contains"
                } else {
                    continue;
                };
                e.push(
                    format!("volumes[{j}].path"),
                    format!(
                        "{} of volume {:?} {relation} volumes[{i}].path {} of volume {:?}: a cache volume needs a directory of its own, neither inside nor containing another volume's",
                        shown(j, dj),
                        vj.name,
                        shown(i, di),
                        vi.name
                    ),
                );
            }
        }
        e.0
    }
}

/// `p` with `.` and `..` components, repeated and trailing slashes resolved as text (`..` at
/// the root stays at the root), without looking at the filesystem.
fn lexically_normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn check_route(e: &mut Errors, i: usize, r: &Route, volumes: &HashSet<&str>) {
    let f = format!("routes[{i}]");
    if !r.prefix.starts_with('/') {
        e.push(
            format!("{f}.prefix"),
            format!("{:?} must start with '/'", r.prefix),
        );
    }
    if r.prefix.contains('\0') {
        e.push(
            format!("{f}.prefix"),
            format!(
                "{:?} contains a NUL byte: a request path holding one is refused (400), so it would never match",
                r.prefix
            ),
        );
    }
    if r.prefix.split('/').any(|seg| seg == ".." || seg == ".") {
        e.push(
            format!("{f}.prefix"),
            format!("{:?} must not contain '.' or '..' segments", r.prefix),
        );
    }
    // Requests are matched by their decoded path with repeated `/` merged: a prefix written
    // otherwise would never match.
    if r.prefix.contains("//") {
        e.push(
            format!("{f}.prefix"),
            format!(
                "{:?} has an empty segment ('//'): request paths are matched with repeated '/' merged, so it would never match; write {:?}",
                r.prefix,
                merged_slashes(&r.prefix)
            ),
        );
    }
    if r.prefix.contains('%') {
        e.push(
            format!("{f}.prefix"),
            format!(
                "{:?} contains '%': routes match the decoded request path, so write the path decoded (a space, not %20)",
                r.prefix
            ),
        );
    }
    if r.prefix.contains(['?', '#']) {
        e.push(
            format!("{f}.prefix"),
            format!(
                "{:?} must not contain '?' or '#': routes match the path, without query or fragment",
                r.prefix
            ),
        );
    }
    match (&r.volume, r.split.is_empty()) {
        (Some(_), false) => e.push(f.clone(), "set either volume or split, not both"),
        (None, true) => e.push(f.clone(), "set volume or split"),
        _ => {}
    }
    if let Some(v) = &r.volume {
        if !volumes.contains(v.as_str()) {
            e.push(format!("{f}.volume"), format!("no volume is named {v:?}"));
        }
    }
    let mut total = 0.0;
    let mut rest = 0;
    let mut refused = 0;
    let mut listed: HashMap<&str, usize> = HashMap::new();
    for (j, t) in r.split.iter().enumerate() {
        let sf = format!("{f}.split[{j}]");
        if !volumes.contains(t.volume.as_str()) {
            e.push(
                format!("{sf}.volume"),
                format!("no volume is named {:?}", t.volume),
            );
        }
        if let Some(first) = listed.insert(t.volume.as_str(), j) {
            listed.insert(t.volume.as_str(), first);
            e.push(
                format!("{sf}.volume"),
                format!(
                    "{:?} is already {f}.split[{first}].volume: list each volume once, with the sum of its shares",
                    t.volume
                ),
            );
        }
        match t.percent {
            Some(p) if !(p > 0.0 && p <= 100.0) => {
                refused += 1;
                e.push(
                    format!("{sf}.percent"),
                    format!("{p} must be greater than 0 and at most 100"),
                )
            }
            Some(p) if p < MIN_SHARE_PERCENT => {
                refused += 1;
                e.push(
                    format!("{sf}.percent"),
                    format!("{p} is less than {MIN_SHARE_PERCENT}, the smallest share: a target must get a share of the URI hashes"),
                )
            }
            Some(p) => total += p,
            None => {
                rest += 1;
                if j + 1 != r.split.len() {
                    e.push(
                        format!("{sf}.percent"),
                        "only the last target may omit percent (it takes the rest)",
                    );
                }
            }
        }
    }
    // Over 100 whatever the refused shares are; any other sum without them would be a
    // second, misleading error.
    if !r.split.is_empty() && (refused == 0 || total > 100.0 + 1e-9) {
        if total > 100.0 + 1e-9 {
            e.push(
                format!("{f}.split"),
                format!("percentages add up to {total}, more than 100"),
            );
        } else if let Some(last) = r.split.last().filter(|t| t.percent.is_none()) {
            // (With a rounding margin: the rest may be exactly the smallest share.)
            if total > 100.0 - MIN_SHARE_PERCENT + 1e-9 {
                e.push(
                    format!("{f}.split[{}]", r.split.len() - 1),
                    format!(
                        "{:?} takes the rest (no percent), but the targets before it add up to {total}: it would get no requests (remove it, or lower the others)",
                        last.volume
                    ),
                );
            }
        } else if rest == 0 && (total - 100.0).abs() > 1e-9 {
            e.push(
                format!("{f}.split"),
                format!("percentages add up to {total}: make them 100 or leave the last target's percent out to take the rest"),
            );
        }
    }
}

/// The smallest share of a split target, in percent (about 4,300 of the 2^32 URI hashes;
/// nginx's split_clients takes two decimals). A smaller one could round to no hash at all.
const MIN_SHARE_PERCENT: f64 = 0.0001;

/// `p` with every run of `/` made one.
fn merged_slashes(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for c in p.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// A Linux TCP congestion control name as `TCP_CONGESTION` takes it (TCP_CA_NAME_MAX is 16
/// with the NUL; the kernel's own modules use lower case, digits and `_`).
fn is_congestion_control_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The level names `logging.level` takes (any case), as tracing's filter reads them.
const LOG_LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// `logging.level`: comma-separated directives, each a level or `TARGET=LEVEL`. A bare word
/// that is not a level would be read by the filter as a target name, silencing every other
/// line (`warning` logged nothing at all), so it is refused, as is a directive whose level is
/// not one of [`LOG_LEVELS`]. `RUST_LOG` is held to the same rule (`logging::init`).
pub fn check_log_level(s: &str) -> Result<(), String> {
    let accepted = || {
        format!(
            "use one of {} (any case), optionally with TARGET=LEVEL directives after commas, such as \"info,content_server::cache=debug\"",
            LOG_LEVELS.join(", ")
        )
    };
    let is_level = |l: &str| LOG_LEVELS.iter().any(|n| n.eq_ignore_ascii_case(l));
    if s.chars().any(char::is_whitespace) {
        return Err(format!("{s:?} must not contain spaces: {}", accepted()));
    }
    let directives: Vec<&str> = s.split(',').filter(|d| !d.is_empty()).collect();
    if directives.is_empty() {
        return Err(format!("{s:?} names no level: {}", accepted()));
    }
    for d in directives {
        let level = match d.rsplit_once('=') {
            Some((target, level)) if !target.is_empty() => level,
            Some(_) => return Err(format!("{d:?} has no target before '=': {}", accepted())),
            None => d,
        };
        if !is_level(level) {
            return Err(format!(
                "{level:?} in {s:?} is not a log level: {}",
                accepted()
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(s)
        .map(drop)
        .map_err(|err| format!("{s:?} is not a tracing filter ({err}): {}", accepted()))
}

/// A listener's `ADDR:PORT` as messages write it (`[::1]:80`; an address that does not parse
/// as it was written).
fn written(address: &str, port: u16) -> String {
    match address.parse::<ListenIp>() {
        Ok(ip) => ip.with_port(port),
        Err(_) => format!("{address}:{port}"),
    }
}

/// Whether sockets on the same port at addresses `a` and `b` cannot both be bound
/// ([`ListenIp::clashes`]; an address that is none is reported on its own).
fn addresses_clash(a: &str, b: &str) -> bool {
    match (a.parse::<ListenIp>(), b.parse::<ListenIp>()) {
        (Ok(x), Ok(y)) => x.clashes(y),
        _ => false,
    }
}
