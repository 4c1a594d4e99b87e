//! The rustls client configuration of one origin: the system's root certificates plus the
//! origin's `ca_file` (PEM), the ring crypto provider, ALPN `http/1.1`. Built at start-up and
//! again when the CA file changes; it must not open connections nor pick server names (that is
//! [`super::connect`]).

use super::OriginError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio_rustls::TlsConnector;

/// The TLS client side of one origin: its configuration, built again when its `ca_file`
/// changes. A CA bundle mounted from a ConfigMap or Secret is updated in place by the kubelet
/// (a new file behind the same path), and a re-issued origin certificate must not need a
/// restart. The file is looked at (one `stat`) before each new connection, beside a TLS
/// handshake that costs a thousand times more; a changed file that cannot be used keeps the last
/// good configuration, logged once per change.
pub(crate) struct Tls {
    name: String,
    ca_file: Option<PathBuf>,
    system: RootCertStore,
    current: RwLock<(TlsConnector, Option<FileId>)>,
}

/// What tells one version of the CA file from another.
type FileId = (u64, u64, u64, i64, i64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

impl Tls {
    /// The configuration of origin `name`: the system's roots plus `ca_file`'s certificates.
    pub(crate) fn new(name: &str, ca_file: Option<&Path>) -> Result<Tls, OriginError> {
        let mut system = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::debug!(origin = name, error = %e, "skipping a system root certificate");
        }
        let (added, _ignored) = system.add_parsable_certificates(native.certs);
        tracing::debug!(
            origin = name,
            system_roots = added,
            "origin TLS roots loaded"
        );
        let id = ca_file.and_then(file_id);
        let cfg = client_config(name, &system, ca_file)?;
        Ok(Tls {
            name: name.to_string(),
            ca_file: ca_file.map(Path::to_path_buf),
            system,
            current: RwLock::new((TlsConnector::from(cfg), id)),
        })
    }

    /// The connector for a new connection, with the CA file as it is now.
    pub(crate) fn connector(&self) -> TlsConnector {
        let read = |l: &RwLock<(TlsConnector, Option<FileId>)>| {
            l.read().unwrap_or_else(|p| p.into_inner()).clone()
        };
        let Some(path) = &self.ca_file else {
            return read(&self.current).0;
        };
        let id = file_id(path);
        let (connector, seen) = read(&self.current);
        if id == seen {
            return connector;
        }
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if cur.1 != id {
            cur.1 = id;
            if id.is_none() {
                // Gone (a bad mount, a hand's mistake): what was loaded stays, said once.
                tracing::error!(origin = %self.name, ca_file = %path.display(), "origin CA file is gone; new connections keep the CA loaded before");
                return cur.0.clone();
            }
            match client_config(&self.name, &self.system, Some(path)) {
                Ok(cfg) => {
                    tracing::info!(origin = %self.name, ca_file = %path.display(), "origin CA file changed: new connections trust it");
                    cur.0 = TlsConnector::from(cfg);
                }
                Err(e) => {
                    tracing::error!(origin = %self.name, error = %e, "origin CA file changed but cannot be used; new connections keep the CA loaded before");
                }
            }
        }
        cur.0.clone()
    }
}

/// A CA bundle larger than this is no CA bundle (the system's whole store is some 200 KiB).
const MAX_CA_FILE_BYTES: u64 = 16 << 20;

/// Build the TLS client configuration for origin `name`: the `system` roots plus `ca_file`'s.
fn client_config(
    name: &str,
    system: &RootCertStore,
    ca_file: Option<&Path>,
) -> Result<Arc<ClientConfig>, OriginError> {
    let setup = |message: String| OriginError::Setup {
        origin: name.to_string(),
        message,
    };
    let mut roots = system.clone();
    if let Some(path) = ca_file {
        let bytes = crate::fs::small::read(path, MAX_CA_FILE_BYTES, "PEM certificates")
            .map_err(|e| setup(format!("ca_file {e}")))?;
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| setup(format!("ca_file {}: {}", path.display(), pem_problem(&e))))?;
        if certs.is_empty() {
            return Err(setup(format!(
                "ca_file {}: no PEM certificate in it",
                path.display()
            )));
        }
        for (i, c) in certs.into_iter().enumerate() {
            roots.add(c).map_err(|e| {
                setup(format!(
                    "ca_file {}: certificate {} is not a usable X.509 CA certificate ({e:?})",
                    path.display(),
                    i + 1
                ))
            })?;
        }
    }
    if roots.is_empty() {
        return Err(setup(
            "no trusted root certificate: the system has none and no ca_file is set".into(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| setup(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// What is wrong with a PEM file, in words (the crate's own text shows markers as byte lists).
fn pem_problem(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    match e {
        Error::MissingSectionEnd { end_marker } => {
            format!(
                "a PEM block has no \"-----END {}-----\" line (cut short?)",
                text(end_marker)
            )
        }
        Error::IllegalSectionStart { line } => {
            format!("a PEM block starts with a malformed line {:?}", text(line))
        }
        Error::Base64Decode(_) => "a PEM block is not valid base64".to_string(),
        Error::Io(io) => format!("cannot be read: {io}"),
        other => other.to_string(),
    }
}
