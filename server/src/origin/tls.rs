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
            .map_err(|e| setup(format!("ca_file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(setup(format!(
                "ca_file {}: no PEM certificate in it",
                path.display()
            )));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| setup(format!("ca_file {}: {e}", path.display())))?;
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
