//! The lab's TLS, with rustls (ring's crypto): a certificate authority made at the lab's setup
//! and a certificate for the farm's site names signed by it ([`make_certs`]); the farm's
//! server configuration ([`server_config`], offering HTTP/2 and HTTP/1.1 by ALPN) and the
//! browsers' ([`client_config`], trusting only the lab's authority and offering the one
//! protocol the run asks for).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// The files of the lab's certificates.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LabCerts {
    /// The authority's certificate (what the browsers trust).
    pub ca: PathBuf,
    /// The sites' certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// Make an authority and a certificate for `names` (the first its common name) signed by it,
/// written as PEM into `dir` (`ca.pem`, `cert.pem`, `key.pem`).
pub fn make_certs(dir: &Path, names: &[&str]) -> Result<LabCerts> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "rlm lab authority");
    let ca = ca.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
    leaf.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("localhost"));
    let cert = leaf.signed_by(&key, &ca, &ca_key)?;
    let certs = LabCerts { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") };
    std::fs::write(&certs.ca, ca.pem())?;
    std::fs::write(&certs.cert, cert.pem())?;
    std::fs::write(&certs.key, key.serialize_pem())?;
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The farm's configuration: the certificate and key of [`make_certs`], HTTP/2 and HTTP/1.1
/// offered by ALPN (HTTP/2 first), TLS 1.3 and 1.2.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// A browser's configuration: the lab's authority (`ca`) trusted, `h2` or `http/1.1` offered
/// by ALPN, sessions resumed as rustls does by default (tickets).
pub fn client_config(ca: &Path, h2: bool) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))? {
        roots.add(c.with_context(|| format!("reading {}", ca.display()))?)?;
    }
    let mut c = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![if h2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
    Ok(Arc::new(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A browser's configuration trusts the farm's certificate and no other: a handshake over
    /// a local socket pair completes with the name in the certificate and fails with another.
    #[tokio::test]
    async fn browsers_trust_the_farms_certificate_and_agree_on_the_protocol() {
        let dir = std::env::temp_dir().join(format!("rlm-tls-test-{}", std::process::id()));
        let certs = make_certs(&dir, &["shop.example", "news.example"]).unwrap();
        let server = tokio_rustls::TlsAcceptor::from(server_config(&certs.cert, &certs.key).unwrap());
        for (name, h2, ok) in [("news.example", true, true), ("shop.example", false, true), ("other.example", false, false)] {
            let client = tokio_rustls::TlsConnector::from(client_config(&certs.ca, h2).unwrap());
            let (a, b) = tokio::io::duplex(64 << 10);
            let accept = tokio::spawn({
                let server = server.clone();
                async move { server.accept(b).await.map(|s| s.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)) }
            });
            let sni = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
            let connected = client.connect(sni, a).await;
            assert_eq!(connected.is_ok(), ok, "{name}");
            if ok {
                let alpn = accept.await.unwrap().unwrap();
                assert_eq!(alpn.as_deref(), Some(if h2 { &b"h2"[..] } else { b"http/1.1" }));
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Counts the bytes written through it.
    struct Counted<T>(T, std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<T> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<T> {
        fn poll_write(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
            let r = std::pin::Pin::new(&mut self.0).poll_write(cx, buf);
            if let std::task::Poll::Ready(Ok(n)) = r {
                self.1.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            r
        }
        fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.0).poll_flush(cx)
        }
        fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    /// The open-loop generator's load counts the farm's handshake bytes: what a full handshake
    /// with the lab's certificate writes is within 15% of
    /// [`crate::openloop::TLS_SERVER_HANDSHAKE_BYTES`].
    #[tokio::test]
    async fn the_farms_handshake_is_the_size_the_load_counts() {
        use tokio::io::AsyncWriteExt;
        let dir = std::env::temp_dir().join(format!("rlm-tls-size-{}", std::process::id()));
        let certs = make_certs(&dir, &["shop.example"]).unwrap();
        let server = tokio_rustls::TlsAcceptor::from(server_config(&certs.cert, &certs.key).unwrap());
        let client = tokio_rustls::TlsConnector::from(client_config(&certs.ca, false).unwrap());
        let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (a, b) = tokio::io::duplex(64 << 10);
        let accept = tokio::spawn({
            let written = written.clone();
            async move {
                let mut s = server.accept(Counted(b, written)).await.unwrap();
                s.flush().await.unwrap();
                s
            }
        });
        let sni = rustls::pki_types::ServerName::try_from("shop.example".to_string()).unwrap();
        let _c = client.connect(sni, a).await.unwrap();
        let _s = accept.await.unwrap();
        let n = written.load(std::sync::atomic::Ordering::Relaxed) as f64;
        let want = crate::openloop::TLS_SERVER_HANDSHAKE_BYTES;
        assert!((n - want).abs() <= 0.15 * want, "the farm wrote {n} bytes in its handshake; the load counts {want}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
