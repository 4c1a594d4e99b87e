//! The admin listener of the real server: `/healthz`, `/readyz` (including a volume root that
//! disappears), `/config` equal to the configuration file, content types, unknown paths, and the
//! listener switched off with an empty `admin.listen`.

mod admin_support;

use admin_support::*;
use content_server::config::Config;
use std::process::{Command, Stdio};
use std::time::Duration;

fn server_for(dir: &std::path::Path) -> Server {
    Server::start(
        |port, admin| {
            config_toml(
                port,
                admin,
                2,
                &[Vol {
                    name: "media",
                    path: dir,
                    offload: "always",
                    threads: 4,
                    max_queue: 16,
                }],
            )
        },
        "",
    )
}

#[test]
fn healthz_and_readyz_are_ok_when_serving() {
    let dir = content_dir(1, 100);
    let server = server_for(dir.path());
    let h = get(server.admin, "/healthz");
    assert_eq!(h.status, 200, "{}", h.body);
    let r = get(server.admin, "/readyz");
    assert_eq!(r.status, 200, "{}", r.body);
    // It is the same process that serves content.
    assert_eq!(get(server.addr, "/f0.bin").status, 200);
    assert_eq!(get(server.admin, "/nope").status, 404);
    let m = get(server.admin, "/metrics");
    assert!(
        m.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        m.headers
    );
}

#[test]
fn config_endpoint_is_the_effective_configuration() {
    let dir = content_dir(1, 100);
    let server = server_for(dir.path());
    let r = get(server.admin, "/config");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json")));
    let served: Config = serde_json::from_str(&r.body).expect("/config is a Config as JSON");
    let expected = Config::load(&server.config_path).expect("the test's config is valid");
    assert_eq!(served, expected);
    // Spot-check the JSON shape operators script against.
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("json");
    assert_eq!(v["volumes"][0]["name"], "media");
    assert_eq!(v["volumes"][0]["pool"]["threads"], 4);
    assert_eq!(v["workers"], 2);
}

#[test]
fn config_endpoint_shows_command_line_overrides() {
    let dir = content_dir(1, 100);
    let root = dir.path().to_path_buf();
    let server = Server::start_with(
        |port, admin, _| {
            vec![
                "serve".into(),
                "--root".into(),
                root.display().to_string(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--admin-listen".into(),
                format!("127.0.0.1:{admin}"),
                "--threads".into(),
                "3".into(),
                "--max-queue".into(),
                "9".into(),
                "--offload".into(),
                "never".into(),
                "--workers".into(),
                "1".into(),
            ]
        },
        "",
    );
    let v: serde_json::Value =
        serde_json::from_str(&get(server.admin, "/config").body).expect("json");
    assert_eq!(v["admin"]["listen"], server.admin.to_string());
    assert_eq!(v["listeners"][0]["port"], server.addr.port());
    assert_eq!(v["workers"], 1);
    let vol = &v["volumes"][0];
    assert_eq!(vol["name"], "root");
    assert_eq!(vol["path"], root.display().to_string());
    assert_eq!(vol["offload"], "never");
    assert_eq!(vol["pool"]["threads"], 3);
    assert_eq!(vol["pool"]["max_queue"], 9);
    // The pool's gauges agree with the configuration shown.
    let m = server.metrics();
    assert_eq!(
        m.get("contentserver_pool_threads", &[("volume", "root")]),
        3.0
    );
    assert_eq!(
        m.get("contentserver_pool_queue_capacity", &[("volume", "root")]),
        9.0
    );
}

#[test]
fn readyz_fails_when_a_volume_root_disappears() {
    let parent = tempfile::tempdir().expect("tempdir");
    let root = parent.path().join("media");
    std::fs::create_dir(&root).expect("mkdir");
    let server = server_for(&root);
    assert_eq!(get(server.admin, "/readyz").status, 200);
    std::fs::remove_dir(&root).expect("rmdir");
    let r = get(server.admin, "/readyz");
    assert_eq!(r.status, 503);
    assert!(r.body.contains("volume \"media\""), "{}", r.body);
    // Liveness is unaffected: restarting would not bring the disk back.
    assert_eq!(get(server.admin, "/healthz").status, 200);
    std::fs::create_dir(&root).expect("mkdir again");
    assert_eq!(get(server.admin, "/readyz").status, 200);
}

#[test]
fn empty_admin_listen_disables_the_admin_listener() {
    let dir = content_dir(1, 100);
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let (port, admin_port) = (free_port(), free_port());
    let toml = config_toml(
        port,
        admin_port,
        1,
        &[Vol {
            name: "media",
            path: dir.path(),
            offload: "always",
            threads: 1,
            max_queue: 1,
        }],
    )
    .replace(
        &format!("listen = \"127.0.0.1:{admin_port}\""),
        "listen = \"\"",
    );
    let path = cfg_dir.path().join("s.toml");
    std::fs::write(&path, toml).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_content-server"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let addr = ([127, 0, 0, 1], port).into();
    let served = wait_until(Duration::from_secs(10), || {
        try_get(addr, "/f0.bin").is_ok_and(|r| r.status == 200)
    });
    let admin_refused = std::net::TcpStream::connect(("127.0.0.1", admin_port)).is_err();
    let _ = child.kill();
    let _ = child.wait();
    assert!(served, "server did not serve content");
    assert!(
        admin_refused,
        "admin port answered although admin.listen is empty"
    );
}
