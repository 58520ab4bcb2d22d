//! TLS checks shared by the worker and the command line: a CA file that parses, the TLS error in
//! an error's chain, and a probe that asks a server whether it speaks TLS — so that a plaintext
//! client meeting a TLS coordinator (or the reverse) is told so in one line, not "transport
//! error".

use std::fmt;
use std::path::Path;
use std::time::Duration;

/// The largest PEM file (a CA certificate) read.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// Read a PEM file: a regular file of at most [`MAX_PEM_BYTES`] (never a device, a FIFO or a
/// directory, which could hang or fill the memory).
pub fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > MAX_PEM_BYTES {
        return Err(format!("{} is {} bytes, over the limit of {MAX_PEM_BYTES} bytes", path.display(), meta.len()));
    }
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Check that a CA file holds at least one PEM certificate, and that each of them parses.
pub fn check_ca(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let bad = |e: &dyn fmt::Display| format!("certificate {} is not a valid certificate: {e}", i + 1);
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    if roots.is_empty() {
        return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".to_owned());
    }
    Ok(())
}

/// The TLS error somewhere in an error's chain. `io::Error` does not list the error it wraps as its
/// source, so each one is looked into.
pub fn rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        if let Some(tls) = inner.and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            return Some(tls);
        }
        next = e.source();
    }
    None
}

/// How long probing a coordinator for TLS may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the server at `authority` (`host:port`, port 80 if none) answers a TLS ClientHello
/// with a TLS record. A plaintext HTTP/2 server answers with a frame, or closes.
pub async fn speaks_tls(authority: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let address = if authority.rsplit(':').next().is_some_and(|p| p.parse::<u16>().is_ok()) {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(&client_hello()).await.ok()?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await.ok()?;
        // Content type handshake (22) or alert (21), then major version 3.
        Some(matches!(head, [21 | 22, 3]))
    };
    matches!(tokio::time::timeout(PROBE_TIMEOUT, probe).await, Ok(Some(true)))
}

/// A minimal TLS 1.2 ClientHello record: a TLS server answers it with a ServerHello or an alert.
fn client_hello() -> Vec<u8> {
    let mut body = vec![3, 3]; // TLS 1.2
    body.extend([0x5a; 32]); // random
    body.push(0); // no session id
    body.extend([0, 4, 0xc0, 0x2f, 0x13, 0x01]); // ECDHE-RSA-AES128-GCM-SHA256, TLS_AES_128_GCM_SHA256
    body.extend([1, 0]); // null compression
    let mut record = vec![22, 3, 1, 0, body.len() as u8 + 4, 1, 0, 0, body.len() as u8];
    record.extend(body);
    record
}
