//! TLS to PostgreSQL through rustls (no OpenSSL), with libpq's `sslmode` meanings.
//!
//! `verify-full`: the chain against the roots and the host name; `verify-ca`: the chain only;
//! `require`/`prefer`: encryption without verification — unless `sslrootcert` is given, in
//! which case `require` verifies the chain, as libpq does. The roots are `sslrootcert`'s PEM
//! file, or the system's store (`rustls-native-certs`). Handshake signatures are always
//! checked, so an unverified mode still encrypts to whoever holds the key it shows.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{VerifierBuilderError, WebPkiServerVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::target::{PgTarget, SslMode};

/// The connector for `target`, or why the roots cannot be loaded.
pub(super) fn connector(target: &PgTarget) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verify_chain = match target.ssl_mode {
        SslMode::Disable | SslMode::Prefer => false,
        SslMode::Require => target.root_cert.is_some(),
        SslMode::VerifyCa | SslMode::VerifyFull => true,
    };
    let verifier: Arc<dyn ServerCertVerifier> = if verify_chain {
        let roots = roots(target)?;
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e: VerifierBuilderError| format!("cannot use the CA certificates: {e}"))?;
        if target.ssl_mode == SslMode::VerifyFull {
            webpki
        } else {
            Arc::new(Lenient {
                chain: Some(webpki),
                algorithms: provider.signature_verification_algorithms,
            })
        }
    } else {
        Arc::new(Lenient {
            chain: None,
            algorithms: provider.signature_verification_algorithms,
        })
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn roots(target: &PgTarget) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match &target.root_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    format!(
                        "cannot read the CA certificates of sslrootcert {}: {e}",
                        path.display()
                    )
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "sslrootcert {} holds no usable CA certificate",
                    path.display()
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "the system's CA store is empty (install ca-certificates), or give the server's CA with sslrootcert=/path/ca.pem in warehouse.url".into(),
                );
            }
        }
    }
    Ok(roots)
}

/// libpq's modes short of `verify-full`: `verify-ca` (`chain`: the chain must lead to a
/// trusted root; the name is not checked), and `require`/`prefer` without a root certificate
/// (no `chain`: encrypted, not verified). Handshake signatures are checked in both.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
