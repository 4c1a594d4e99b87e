//! The operator binary's start-up: what it refuses and how it says so (one line, the exit code
//! of the README: 1 for a failed start, 2 for command-line syntax), and logs without terminal
//! colours when they go to a file or a pipe, as in a container.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A kubeconfig naming an API server on a port nothing listens on.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = dir.join("kubeconfig");
    let mut f = std::fs::File::create(&path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    )
    .unwrap();
    path
}

/// Runs the operator with `args` until it exits (at most `within`; then it is killed).
fn operator(args: &[&str], within: Duration) -> (Option<i32>, String, String) {
    operator_with_env(args, &[], within)
}

/// [`operator`] with environment variables.
fn operator_with_env(
    args: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_content-operator"))
        .args(args)
        .envs(env.iter().copied())
        .env("KUBECONFIG", unreachable_kubeconfig(dir.path()))
        .env("RUST_BACKTRACE", "1")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() && t.elapsed() < within {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A metrics address in use stops the start with a line naming it: running on without
/// /healthz would get the pod restarted by its liveness probe with nothing said.
#[test]
fn a_metrics_address_in_use_stops_the_start_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, _out, err) = operator(
        &["run", "--no-leader-election", "--metrics-listen", &addr],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "not one line:\n{err}");
    assert!(
        lines[0].starts_with("content-operator: cannot bind the metrics listener on ")
            && lines[0].contains(&addr)
            && lines[0].contains("--metrics-listen"),
        "{err}"
    );
}

/// The default `*:PORT` takes the port on IPv4 too (one dual-stack socket: the operator's
/// probes work in IPv4, IPv6-only and dual-stack clusters), so a port taken on 127.0.0.1 stops
/// it; a malformed address is a usage error.
#[test]
fn metrics_listen_star_takes_both_families() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let star = format!("*:{}", taken.local_addr().unwrap().port());
    let (code, _out, err) = operator(
        &["run", "--no-leader-election", "--metrics-listen", &star],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot bind the metrics listener") && err.contains(&star),
        "{err}"
    );
    for bad in ["*", "localhost:8080", "*:99999"] {
        let (code, _out, err) =
            operator(&["run", "--metrics-listen", bad], Duration::from_secs(10));
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("*:PORT"), "{bad}: {err}");
    }
    let (code, _out, err) = operator(
        &["run", "--metrics-listen", "[::ffff:127.0.0.1]:8080"],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("IPv4-mapped") && err.contains("127.0.0.1:8080"),
        "{err}"
    );
}

/// A failed start is one line, no backtrace even with RUST_BACKTRACE set.
#[test]
fn a_failed_start_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _out, err) = {
        let out = Command::new(env!("CARGO_BIN_EXE_content-operator"))
            .args(["run", "--metrics-listen", "127.0.0.1:0"])
            .env("KUBECONFIG", dir.path().join("missing-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("HOME", dir.path())
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line:\n{err}");
    assert!(
        err.starts_with("content-operator: connecting to the Kubernetes API"),
        "{err}"
    );
    assert!(
        !err.contains("Caused by") && !err.contains("backtrace"),
        "{err}"
    );
    // Each cause once (kube's errors print their sources themselves).
    assert_eq!(err.matches("missing-kubeconfig").count(), 1, "{err}");
}

/// A lease shorter than leader election can work with is refused as a flag error (exit 2),
/// not raised without a word.
#[test]
fn a_lease_duration_out_of_range_is_a_flag_error() {
    for bad in ["0", "2", "3601"] {
        let (code, _out, err) = operator(
            &["run", "--lease-duration-secs", bad],
            Duration::from_secs(10),
        );
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("--lease-duration-secs"), "{bad}: {err}");
    }
}

/// A Lease or namespace name the API server would refuse is a flag error (exit 2) naming the
/// flag: it used to start, and retry `invalid uri character` every 2 s as a WARN (never the
/// leader, never reconciling), or to watch a namespace that cannot exist.
#[test]
fn names_the_api_would_refuse_are_flag_errors() {
    for (args, flag) in [
        (&["run", "--lease-name", "BAD NAME"][..], "--lease-name"),
        (&["run", "--lease-name", "Upper"], "--lease-name"),
        (&["run", "--namespaces", "Bad_NS,x"], "--namespaces"),
        (&["run", "--namespaces", "a,,b"], "--namespaces"),
        (&["run", "--lease-namespace", "a.b"], "--lease-namespace"),
    ] {
        let (code, _out, err) = operator(args, Duration::from_secs(10));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    // Good names (spaces around list entries trimmed) start: the run goes on until killed.
    let (code, out, err) = operator(
        &[
            "run",
            "--metrics-listen",
            "127.0.0.1:0",
            "--lease-name",
            "content-operator.leader",
            "--namespaces",
            "media, edge-1",
        ],
        Duration::from_secs(5),
    );
    assert_eq!(code, None, "it stopped: {err}");
    assert!(out.contains(r#"Namespaces(["media", "edge-1"])"#), "{out}");
}

/// `--allow-host-path` (off by default) is also `ALLOW_HOST_PATH`, read as a boolean the way
/// environments spell one (`1`, `yes`, `on`, `true`; `0`, `no`, `off`, `false`), as is
/// `NO_LEADER_ELECTION`; the start line says which policy runs. Anything else is a flag
/// error naming the variable's flag.
#[test]
fn allow_host_path_is_off_unless_the_flag_or_its_variable_says_so() {
    let started = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["run", "--metrics-listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (code, out, err) = operator_with_env(&all, env, Duration::from_secs(4));
        assert_eq!(code, None, "it stopped: {err}");
        out
    };
    for (args, env, on) in [
        (&[][..], &[][..], false),
        (&["--allow-host-path"], &[], true),
        (&[], &[("ALLOW_HOST_PATH", "1")], true),
        (&[], &[("ALLOW_HOST_PATH", "yes")], true),
        (&[], &[("ALLOW_HOST_PATH", "false")], false),
        (
            &[],
            &[("ALLOW_HOST_PATH", "0"), ("NO_LEADER_ELECTION", "1")],
            false,
        ),
    ] {
        let out = started(args, env);
        assert!(
            out.contains(&format!("allow_host_path: {on}")),
            "{args:?} {env:?}: {out}"
        );
    }
    let (code, _, err) = operator_with_env(
        &["run"],
        &[("ALLOW_HOST_PATH", "maybe")],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--allow-host-path"), "{err}");
}

/// Logs written to a pipe carry no terminal colour codes.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let (_code, out, err) = operator(
        &[
            "run",
            "--no-leader-election",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        Duration::from_millis(1500),
    );
    assert!(out.contains("INFO"), "no log lines:\n{out}\n{err}");
    assert!(!out.contains('\u{1b}'), "colour codes in the log:\n{out:?}");
}

/// `content-operator crd | head -1`: the reader stops early; the operator exits 1 with one
/// line, never a panic.
#[test]
fn crd_to_a_closed_pipe_is_an_error_not_a_panic() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_content-operator"))
        .arg("crd")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start content-operator crd");
    let mut first = [0u8; 16];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("the CRD begins");
    // The read end is dropped here: the rest of the CRD meets a closed pipe.
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("writing the CRD"), "{err}");
}
