//! The contract between operator and server: for every ContentServer in `examples/`, the
//! ConfigMap the operator renders is accepted by the server's config loader and by the real
//! `content-server check-config`, and a real `content-server serve --config` process started from
//! it (volume paths rewritten to temp dirs, listeners on free 127.0.0.1 ports) serves a file
//! from each volume.
//!
//! The server binary is built by the test itself from this workspace's sources (`cargo build -p
//! content-server --bin content-server`, into a target directory of its own), so `cargo test -p
//! content-operator` needs nothing built before; `CONTENT_SERVER_BIN` names a prebuilt binary
//! instead. The test fails (never skips) when the build fails.

mod support;

use content_operator::builders::configmap::{configmap, render, CONFIG_KEY};
use content_server::config::Config;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// The `content-server` binary of this workspace, built now (a no-op when up to date) with the
/// cargo that runs this test. It gets a target directory of its own, next to this test's
/// profile directories: building it into the shared one would replace the binary that the
/// server's own tests of the same `cargo test --workspace --all-features` run use with one
/// built without their features.
fn server_bin() -> PathBuf {
    if let Ok(p) = std::env::var("CONTENT_SERVER_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/contract-HASH -> target/
    let exe = std::env::current_exe().expect("path of this test binary");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary lives in <target>/<profile>/deps");
    let target_dir = target.join("contract-content-server");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "-p", "content-server", "--bin", "content-server"])
        .arg("--manifest-path")
        .arg(repo_root().join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .unwrap_or_else(|e| panic!("run {cargo:?} to build content-server: {e}"));
    assert!(
        out.status.success(),
        "`cargo build -p content-server --bin content-server --target-dir {}` failed ({}):\n{}",
        target_dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = target_dir.join("debug").join("content-server");
    assert!(bin.is_file(), "cargo built no {}", bin.display());
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// GET over a fresh connection: (status, body).
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_example_config_is_accepted_and_served_by_the_real_server() {
    let bin = server_bin();
    for (file, _, mut cs) in example_contentservers() {
        cs.metadata.namespace = Some(NS.into());
        cs.metadata.uid = Some("uid".into());
        let rendered = render(&cs.spec).expect("render");
        let cm = configmap(&cs, &rendered);
        let toml = cm
            .data
            .as_ref()
            .and_then(|d| d.get(CONFIG_KEY))
            .expect("config in the ConfigMap")
            .clone();

        // 1. The server's own loader.
        let mut cfg = Config::from_toml(&toml).unwrap_or_else(|e| {
            panic!("examples/{file}: server rejects the rendered TOML: {e}\n{toml}")
        });
        cfg.normalize();
        cfg.validate()
            .unwrap_or_else(|e| panic!("examples/{file}: invalid rendered config: {e}\n{toml}"));

        // 2. The real `check-config`, on the ConfigMap's bytes as they are.
        let dir = tempfile::tempdir().expect("tempdir");
        let as_rendered = dir.path().join("rendered.toml");
        std::fs::write(&as_rendered, &toml).expect("write");
        let out = Command::new(&bin)
            .arg("check-config")
            .arg(&as_rendered)
            .output()
            .expect("run check-config");
        assert!(
            out.status.success(),
            "examples/{file}: check-config failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );

        // 3. A real server from the same config with local paths and free ports.
        let mut local = cfg.clone();
        for v in &mut local.volumes {
            let d = dir.path().join("vol").join(&v.name);
            std::fs::create_dir_all(&d).expect("mkdir");
            v.path = d;
        }
        let http_port = free_port();
        let admin_port = free_port();
        local.listeners[0].address = "127.0.0.1".into();
        local.listeners[0].port = http_port;
        local.admin.listen = format!("127.0.0.1:{admin_port}");
        local.workers = 1;
        local.shutdown_timeout_secs = 1;
        // Probe files: for every route, candidate URIs written into every volume the route may
        // use, each file naming its volume, so the response says which volume served it.
        // Cache routes fetch from an origin: their serving is the cache e2e's (a real origin
        // behind the rendered config); here the server must start from the config and serve
        // its static routes. The origin's CA and the purge token are files of the pod.
        let mut uris = Vec::new();
        let cache_dir = dir.path().join("secrets");
        std::fs::create_dir_all(&cache_dir).expect("mkdir");
        for o in &mut local.origins {
            o.ca_file = None;
            o.sni = None;
            o.servers = vec![format!("http://127.0.0.1:{}", free_port())];
        }
        if !local.admin.purge_token_file.is_empty() {
            let token = cache_dir.join("purge-token");
            std::fs::write(&token, "token").expect("write token");
            local.admin.purge_token_file = token.display().to_string();
        }
        for r in local.routes.iter().filter(|r| r.origin.is_none()) {
            let prefix = if r.prefix.ends_with('/') {
                r.prefix.clone()
            } else {
                format!("{}/", r.prefix)
            };
            let targets: Vec<String> = match &r.volume {
                Some(v) => vec![v.clone()],
                None => r.split.iter().map(|t| t.volume.clone()).collect(),
            };
            for i in 0..48 {
                let uri = format!("{prefix}probe-{i}.txt");
                let rel = if r.strip_prefix {
                    uri[r.prefix.len()..].trim_start_matches('/').to_string()
                } else {
                    uri.trim_start_matches('/').to_string()
                };
                for t in &targets {
                    let root = &local
                        .volumes
                        .iter()
                        .find(|v| &v.name == t)
                        .expect("volume")
                        .path;
                    let p = root.join(&rel);
                    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                    std::fs::write(&p, format!("served-by:{t}")).expect("write probe");
                }
                uris.push(uri);
            }
        }
        let cfg_path = dir.path().join("local.toml");
        std::fs::write(&cfg_path, local.to_toml().expect("render local")).expect("write");
        let child = Command::new(&bin)
            .arg("serve")
            .arg("--config")
            .arg(&cfg_path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start content-server");
        let mut server = Server(child);
        let http: SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
        let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().expect("addr");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if matches!(get(admin, "/readyz"), Some((200, _))) {
                break;
            }
            if let Ok(Some(status)) = server.0.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = server.0.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("examples/{file}: content-server exited with {status}: {err}");
            }
            assert!(
                Instant::now() < deadline,
                "examples/{file}: server not ready on /readyz within 15s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut served = BTreeSet::new();
        for uri in &uris {
            let (status, body) = get(http, uri).unwrap_or_else(|| panic!("GET {uri}: no response"));
            assert_eq!(status, 200, "examples/{file}: GET {uri} -> {status} {body}");
            let vol = body
                .strip_prefix("served-by:")
                .unwrap_or_else(|| panic!("examples/{file}: GET {uri}: unexpected body {body:?}"));
            served.insert(vol.to_string());
        }
        let all: BTreeSet<String> = local
            .volumes
            .iter()
            .filter(|v| v.cache.is_none())
            .map(|v| v.name.clone())
            .collect();
        assert_eq!(served, all, "examples/{file}: every volume serves a file");
        drop(server);
    }
}
