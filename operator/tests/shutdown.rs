//! The operator process exits after SIGTERM even when the API server it talks to is unreachable
//! (a terminating pod must not hang until the kubelet kills it).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigterm_exits_within_the_grace_period_with_the_api_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut f = std::fs::File::create(&kubeconfig).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_content-operator"))
        .args([
            "run",
            "--no-leader-election",
            "--metrics-listen",
            "127.0.0.1:0",
            "--shutdown-grace-secs",
            "1",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let it start its watches (which fail and retry against the closed port).
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "operator exited early");
    let t = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        if t.elapsed() > Duration::from_secs(8) {
            let _ = child.kill();
            panic!("operator still running 8 s after SIGTERM (grace 1 s)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
