//! Sending a granted outgoing request to an address that was checked.
//!
//! A name in `http_hosts` is resolved here, once; every address it resolves
//! to is checked ([`is_public`]); the connection is made to the first
//! public one (any one, with `allow_private_addresses`), so a name that
//! resolves — or is re-bound between two look-ups — to a loopback, private,
//! link-local or unique-local address is never reached by surprise. The
//! TLS handshake verifies the certificate against the name, not the
//! address. Timeouts are those of wasmtime-wasi-http's own client, whose
//! sending this follows (HTTP/1.1 through hyper, rustls with the webpki
//! roots).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http_body::Body;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// The default of each timeout a guest did not set (wasmtime-wasi-http's).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether `ip` is an address of the public internet: not loopback,
/// unspecified, private (RFC 1918), shared (100.64/10), link-local,
/// unique-local (fc00::/7), site-local, multicast, broadcast, documentation,
/// benchmarking or reserved; an IPv4 address mapped into IPv6 (or behind
/// NAT64, 64:ff9b::/96) is judged as the IPv4 address it carries.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 0 && c == 0))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [a, b] = segments[6].to_be_bytes();
        let [c, d] = segments[7].to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00
        || (segments[0] & 0xffc0) == 0xfe80
        || (segments[0] & 0xffc0) == 0xfec0
        || (segments[0] == 0x2001 && segments[1] == 0x0db8)
        || segments[..6] == [0, 0, 0, 0, 0, 0])
}

/// Why a destination was not connected to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrivateDestination {
    /// `host:port` as the guest named it.
    pub destination: String,
    /// Every address it resolved to, none of them public.
    pub addresses: Vec<IpAddr>,
}

impl std::fmt::Display for PrivateDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addresses: Vec<String> = self.addresses.iter().map(IpAddr::to_string).collect();
        write!(
            f,
            "{} (resolves to {})",
            self.destination,
            addresses.join(", ")
        )
    }
}

/// Why [`checked_address`] found nothing to connect to.
#[derive(Debug)]
pub enum Refusal {
    /// Every address the name resolves to is not public.
    Private(PrivateDestination),
    /// The look-up failed, timed out or found nothing.
    Lookup(Error),
}

/// The address to connect to for `host` on `port`: the first public one it
/// resolves to, or with `allow_private` the first of all. The look-up has
/// `timeout`.
pub async fn checked_address(
    host: &str,
    port: u16,
    allow_private: bool,
    timeout: Duration,
) -> Result<SocketAddr, Refusal> {
    let lookup = tokio::net::lookup_host((host, port));
    let addresses: Vec<SocketAddr> = match tokio::time::timeout(timeout, lookup).await {
        Err(_) => return Err(Refusal::Lookup(Error::DnsTimeout)),
        Ok(Err(error)) => {
            return Err(Refusal::Lookup(Error::DnsError {
                rcode: Some(error.to_string()),
                info_code: None,
            }));
        }
        Ok(Ok(addresses)) => addresses.collect(),
    };
    let chosen = addresses
        .iter()
        .find(|address| allow_private || is_public(address.ip()));
    match chosen {
        Some(address) => Ok(*address),
        None if addresses.is_empty() => Err(Refusal::Lookup(Error::DestinationNotFound)),
        None => Err(Refusal::Private(PrivateDestination {
            destination: format!("{host}:{port}"),
            addresses: addresses.iter().map(SocketAddr::ip).collect(),
        })),
    }
}

/// A response body whose frames must each arrive within a time
/// (wasmtime-wasi-http's `between_bytes_timeout`).
struct TimedBody {
    incoming: hyper::body::Incoming,
    timeout: tokio::time::Interval,
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(if error.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(error)
            }))),
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}

/// The response and the future that drives the rest of its connection.
pub type Sent = (
    http::Response<TimedBodyBox>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// A response body whose frames must each arrive within the request's
/// between-bytes timeout, boxed.
pub type TimedBodyBox = http_body_util::combinators::UnsyncBoxBody<Bytes, Error>;

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T> Stream for T where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static
{
}

/// Send `request` to `address` (checked by [`checked_address`]), with TLS
/// for an `https` request verified against `host`.
pub async fn send_to(
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    address: SocketAddr,
    host: &str,
) -> Result<Sent, Error> {
    use http_body_util::BodyExt;
    let option = |pick: fn(&RequestOptions) -> Option<Duration>| {
        options.as_ref().and_then(pick).unwrap_or(DEFAULT_TIMEOUT)
    };
    let connect_timeout = option(|o| o.connect_timeout);
    let first_byte_timeout = option(|o| o.first_byte_timeout);
    let between_bytes_timeout = option(|o| o.between_bytes_timeout).max(Duration::new(0, 1));
    let https = request.uri().scheme() == Some(&Scheme::HTTPS);

    let tcp = tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(address))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(Error::Connect)?;
    let stream: Box<dyn Stream> = if https {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|_| Error::TlsProtocolError)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = match host.parse::<IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::from(ip),
            Err(_) => rustls::pki_types::ServerName::try_from(host.to_string())?,
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        Box::new(connector.connect(name, tcp).await.map_err(Error::Tls)?)
    } else {
        Box::new(tcp)
    };
    let (mut sender, connection) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    // The request line carries the path only, as to an origin server.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_string();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;

    let mut connection = Box::pin(connection);
    let send = tokio::time::timeout(first_byte_timeout, sender.send_request(request));
    tokio::pin!(send);
    // Drive the connection while waiting for the response head.
    let mut connection_done = false;
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = send.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        if !connection_done && let Poll::Ready(result) = connection.as_mut().poll(cx) {
            connection_done = true;
            if let Err(error) = result {
                return Poll::Ready(Ok(Err(error)));
            }
        }
        Poll::Pending
    })
    .await
    .map_err(|_| Error::ConnectionReadTimeout)??;
    let mut timeout = tokio::time::interval(between_bytes_timeout);
    timeout.reset();
    let response = response.map(|incoming| TimedBody { incoming, timeout }.boxed_unsync());
    let rest: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async move {
        if connection_done {
            return Ok(());
        }
        connection.await.map_err(|error| {
            if error.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(error)
            }
        })
    });
    Ok((response, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_of_the_public_internet_are_public() {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        for private in [
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.5",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "192.0.0.8",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "64:ff9b::a00:1",
            "::127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_name_that_resolves_only_to_private_addresses_is_refused_unless_allowed() {
        let timeout = Duration::from_secs(5);
        let private = |result: Result<SocketAddr, Refusal>| match result {
            Err(Refusal::Private(refused)) => refused,
            other => panic!("{other:?}"),
        };
        let refused = private(block_on(checked_address("localhost", 8080, false, timeout)));
        assert_eq!(refused.destination, "localhost:8080");
        assert!(refused.addresses.iter().all(|ip| ip.is_loopback()));
        assert!(
            refused
                .to_string()
                .starts_with("localhost:8080 (resolves to ")
        );
        let literal = private(block_on(checked_address("127.0.0.1", 9, false, timeout)));
        assert_eq!(
            literal.addresses,
            vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        let allowed = block_on(checked_address("127.0.0.1", 9, true, timeout)).unwrap();
        assert_eq!(allowed, "127.0.0.1:9".parse().unwrap());
    }
}
