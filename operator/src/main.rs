//! The `content-operator` binary: `run` (default) starts the controller behind Lease-based leader
//! election plus the /metrics and /healthz endpoint; `crd` prints the CRD YAML. Only argument
//! parsing and process wiring live here.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use content_operator::controller::{self, Scope};
use content_operator::leader::LeaderElector;
use content_operator::metrics::{self, Metrics};
use content_operator::validation::Policy;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "content-operator",
    version,
    about = "Reconciles ContentServer resources into serving pods"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default).
    Run(RunArgs),
    /// Print the ContentServer CustomResourceDefinition as YAML.
    Crd,
}

#[derive(Parser, Debug)]
struct RunArgs {
    /// Namespaces to watch, comma separated; empty watches all namespaces.
    #[arg(
        long,
        env = "WATCH_NAMESPACES",
        value_delimiter = ',',
        default_value = "",
        value_parser = namespace_arg
    )]
    namespaces: Vec<String>,
    /// Address of the /metrics and /healthz endpoint.
    /// `ADDR:PORT`, `[V6]:PORT` or `*:PORT` (every IPv4 and IPv6 address).
    #[arg(long, env = "METRICS_LISTEN", default_value = "*:8080", value_parser = metrics::parse_listen)]
    metrics_listen: metrics::Listen,
    /// Disable Lease-based leader election (only for a single replica).
    #[arg(long, env = "NO_LEADER_ELECTION", value_parser = clap::builder::BoolishValueParser::new())]
    no_leader_election: bool,
    /// Name of the Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "content-operator", value_parser = lease_name_arg)]
    lease_name: String,
    /// Namespace of the Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default", value_parser = namespace_arg)]
    lease_namespace: String,
    /// This replica's identity in the Lease and on Events.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Lease duration in seconds (3 to 3600): how long a replica waits for a leader that
    /// stopped renewing before it takes over.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=3600))]
    lease_duration_secs: u64,
    /// After SIGTERM/SIGINT, how long in-flight reconciles may take before the process exits
    /// anyway (an unreachable API server must not keep a terminating pod alive).
    #[arg(long, env = "SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    shutdown_grace_secs: u64,
    /// Allow hostPath volumes (node directories, such as a caching node's disks). Off by
    /// default: a hostPath reads and writes the node's own files, so anyone who may create a
    /// ContentServer could mount any of them. A ContentServer still opts in with
    /// spec.allowHostPath.
    #[arg(long, env = "ALLOW_HOST_PATH", value_parser = clap::builder::BoolishValueParser::new())]
    allow_host_path: bool,
}

/// A namespace's name (a DNS label), trimmed; "" only as the whole of `--namespaces` (all).
fn namespace_arg(s: &str) -> Result<String, String> {
    let s = s.trim();
    match content_operator::validation::dns_label(s) {
        Some(_) if s.is_empty() => Ok(String::new()),
        Some(why) => Err(format!("{s:?} is no namespace name: it {why}")),
        None => Ok(s.to_string()),
    }
}

/// The Lease's name (a DNS subdomain, as every object name).
fn lease_name_arg(s: &str) -> Result<String, String> {
    match content_operator::validation::dns_subdomain(s) {
        Some(why) => Err(format!("{s:?} is no object name: it {why}")),
        None => Ok(s.to_string()),
    }
}

/// Exit 1 with one line (the error and its causes, no backtrace) on a failed start, like
/// content-server; 2 for command-line syntax (clap).
fn main() -> std::process::ExitCode {
    match start() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("content-operator: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `e` and its causes joined by `: `, leaving out a cause whose text is already there (kube's
/// errors print their sources themselves: `{e:#}` said the missing kubeconfig three times).
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn start() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crd) => {
            use std::io::Write;
            let yaml = content_operator::crd_yaml().context("rendering the CRD")?;
            // A reader that stopped early (`| head`) is a one-line error, not a panic.
            let mut out = std::io::stdout().lock();
            out.write_all(yaml.as_bytes())
                .and_then(|()| out.flush())
                .context("writing the CRD to stdout")
        }
        Some(Command::Run(args)) => run(checked(args)),
        None => run(checked(RunArgs::parse_from(["content-operator"]))),
    }
}

/// What one flag's parser cannot see: an empty name among `--namespaces` (`a,,b`) is a typo,
/// not "every namespace" (exit 2, as any flag error).
fn checked(args: RunArgs) -> RunArgs {
    if args.namespaces.len() > 1 && args.namespaces.iter().any(String::is_empty) {
        use clap::CommandFactory as _;
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                "--namespaces has an empty name between commas (leave the whole list empty to watch every namespace)",
            )
            .exit();
    }
    args
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    // Colours only for a terminal: a container's log is a file.
    tracing_subscriber::fmt()
        .with_env_filter(content_operator::controller::log_filter(
            std::env::var("RUST_LOG").ok().as_deref(),
        ))
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(async move {
        tokio::spawn(exit_after_grace(Duration::from_secs(
            args.shutdown_grace_secs,
        )));
        // (The API's configuration first: without it, no port is taken.)
        let client = Client::try_default()
            .await
            .context("connecting to the Kubernetes API (in-cluster or kubeconfig)")?;
        let listener = metrics::bind(args.metrics_listen).await?;
        let metrics = Metrics::new();
        let m = metrics.clone();
        let server = tokio::spawn(async move {
            if let Err(e) = metrics::serve(listener, m).await {
                tracing::error!(error = %format!("{e:#}"), "metrics endpoint stopped");
            }
        });
        let identity = args
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("content-operator-{}", std::process::id()));
        let ns: Vec<String> = args
            .namespaces
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let scope = if ns.is_empty() {
            Scope::All
        } else {
            Scope::Namespaces(ns)
        };
        let policy = Policy {
            allow_host_path: args.allow_host_path,
        };
        tracing::info!(?scope, identity, ?policy, "starting content-operator");

        if args.no_leader_election {
            controller::run(client, scope, metrics, identity, policy).await;
        } else {
            let lease_duration = Duration::from_secs(args.lease_duration_secs);
            let elector = LeaderElector::new(
                Api::<Lease>::namespaced(client.clone(), &args.lease_namespace),
                &args.lease_name,
                &identity,
                lease_duration,
            );
            let retry = elector.retry_period();
            // A standby replica waits for the lease until it is told to stop: SIGTERM must not
            // wait out the shutdown grace period.
            let acquired = tokio::select! {
                acquired = elector.acquire(retry) => acquired,
                () = shutdown_requested() => {
                    tracing::info!("shutdown requested while waiting for the leader lease");
                    server.abort();
                    return Ok(());
                }
            };
            tracing::info!(identity, "leading");
            tokio::select! {
                _ = controller::run(client, scope, metrics, identity.clone(), policy) => {
                    if let Err(e) = elector.release().await {
                        tracing::warn!(error = %e, "releasing the leader lease");
                    }
                }
                why = elector.hold(retry, acquired) => {
                    anyhow::bail!("lost leadership: {why}");
                }
            }
        }
        server.abort();
        Ok(())
    })
}

/// Returns on SIGTERM or SIGINT (never, when SIGTERM cannot be watched).
async fn shutdown_requested() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM");
            std::future::pending::<()>().await;
        }
    }
}

/// The controller stops itself on SIGTERM/SIGINT (`shutdown_on_signal`), but waits for watches
/// and reconciles that may hang on an unreachable API server: give them a grace period, then exit.
async fn exit_after_grace(grace: Duration) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; relying on the default action");
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!(grace_secs = grace.as_secs(), "shutdown requested");
    tokio::time::sleep(grace).await;
    tracing::warn!("shutdown grace period over; exiting");
    std::process::exit(0);
}
