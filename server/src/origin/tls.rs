//! The rustls client configuration of one origin: the system's root certificates plus the
//! origin's `ca_file` (PEM), the ring crypto provider, ALPN `http/1.1`. Built once at start-up;
//! it must not open connections nor pick server names (that is [`super::connect`]).

use super::OriginError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::path::Path;
use std::sync::Arc;

/// Build the TLS client configuration for origin `name`.
pub(crate) fn client_config(
    name: &str,
    ca_file: Option<&Path>,
) -> Result<Arc<ClientConfig>, OriginError> {
    let setup = |message: String| OriginError::Setup {
        origin: name.to_string(),
        message,
    };
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(origin = name, error = %e, "skipping a system root certificate");
    }
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
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
    tracing::debug!(
        origin = name,
        system_roots = added,
        "origin TLS roots loaded"
    );
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
        Error::Base64Decode(why) => format!("a PEM block is not valid base64 ({why})"),
        Error::Io(io) => format!("cannot be read: {io}"),
        other => other.to_string(),
    }
}
