//! The operator process exits after SIGTERM even when the API server it talks to is unreachable
//! (a terminating pod must not hang until the kubelet kills it), and a standby replica waiting
//! for the leader lease exits at once.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts the operator with `args` against an unreachable API server, sends SIGTERM after it ran
/// for a while, and asserts it exits successfully within `within`.
fn exits_after_sigterm(args: &[&str], within: Duration) {
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
        .args(["run", "--metrics-listen", "127.0.0.1:0"])
        .args(args)
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
        if t.elapsed() > within {
            let _ = child.kill();
            panic!("operator still running {within:?} after SIGTERM ({args:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_exits_within_the_grace_period_with_the_api_unreachable() {
    exits_after_sigterm(
        &["--no-leader-election", "--shutdown-grace-secs", "1"],
        Duration::from_secs(8),
    );
}

/// A replica that does not lead (here: it cannot reach the API server, so it keeps retrying the
/// lease) stops waiting for the lease on SIGTERM instead of sitting out the grace period.
#[test]
fn a_standby_replica_exits_promptly_on_sigterm() {
    exits_after_sigterm(&["--shutdown-grace-secs", "30"], Duration::from_secs(3));
}
