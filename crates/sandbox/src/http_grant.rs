//! Outgoing HTTP of workflow plugins (`wasi:http/outgoing-handler`), gated
//! by the workflow's `http_hosts` grant.
//!
//! A plugin reaches a host only when an entry allows it: `host` allows
//! HTTPS on port 443, `host:port` exactly that port (HTTP or HTTPS). Names
//! compare case-insensitively before any resolution, so a grant for
//! `api.example.com` does not open whatever else shares its address.
//! Authorities with userinfo and IPv6 literals are refused. Anything else
//! is answered with the `wasi:http` error `HTTP-request-denied` and
//! remembered, so a failed step can say which destination was refused.
//!
//! A granted name is then resolved once and connected to at an address
//! that was checked (`http_connect`): one that resolves only to
//! loopback, private, link-local or unique-local addresses (or is re-bound
//! to one) is refused with `destination-IP-prohibited` unless the workflow
//! sets `allow_private_addresses = true`, and remembered the same way.
//!
//! Requests are sent as wasmtime-wasi-http's client sends them (hyper;
//! HTTPS through rustls with the webpki roots). While the guest waits on a response the
//! host is blocked outside the guest, where the epoch deadline cannot fire,
//! so every timeout of a request (connect, first byte, between bytes) is
//! capped at the plugin's call deadline, and so is the whole exchange up to
//! the response head (the TLS handshake has no timeout of its own).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::uri::Scheme;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::http_connect::{Refusal, checked_address, send_to};

/// One `http_hosts` entry: a lowercase name and, optionally, the one port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AllowedHost {
    host: String,
    port: Option<u16>,
}

/// The outgoing-HTTP grant of one plugin instance: the hosts it may reach,
/// whether they may be reached at private addresses, the cap on each
/// request's timeouts, and the destinations it was refused. A clone starts
/// with no refusals (each step's grant is a clone of its plugin's).
#[derive(Debug, Default)]
pub struct HttpGrant {
    hosts: Vec<AllowedHost>,
    allow_private: bool,
    timeout_cap: Option<Duration>,
    /// `host:port` of every refused request of the current step, in order,
    /// without repeats.
    pub denied: Vec<String>,
    /// Every granted destination of the current step refused because it
    /// resolves only to addresses that are not public, as
    /// `host:port (resolves to ADDRESSES)`, in order, without repeats
    /// (shared with the requests in flight, which find it out).
    private: Arc<Mutex<Vec<String>>>,
}

impl Clone for HttpGrant {
    fn clone(&self) -> Self {
        Self {
            hosts: self.hosts.clone(),
            allow_private: self.allow_private,
            timeout_cap: self.timeout_cap,
            denied: self.denied.clone(),
            private: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl HttpGrant {
    /// A grant for `entries` (`host` or `host:port`, as checked by the
    /// workflow config) with every request timeout capped at
    /// `call_timeout`, reaching private addresses only with
    /// `allow_private`. Errors name the entry that is not `host` or
    /// `host:port` with a port from 1 to 65535.
    pub fn new(
        entries: &[String],
        call_timeout: Duration,
        allow_private: bool,
    ) -> Result<Self, String> {
        let hosts = entries
            .iter()
            .map(|entry| {
                let (host, port) = match entry.rsplit_once(':') {
                    Some((host, port)) => {
                        let port = port
                            .parse::<u16>()
                            .ok()
                            .filter(|port| *port != 0)
                            .ok_or_else(|| format!("{entry:?}: the port must be 1 to 65535"))?;
                        (host, Some(port))
                    }
                    None => (entry.as_str(), None),
                };
                if host.is_empty() {
                    return Err(format!("{entry:?}: the host is empty"));
                }
                Ok(AllowedHost {
                    host: host.to_ascii_lowercase(),
                    port,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            hosts,
            allow_private,
            timeout_cap: Some(call_timeout),
            denied: Vec::new(),
            private: Arc::default(),
        })
    }

    /// The granted destinations of this step refused for resolving only to
    /// addresses that are not public, each as `host:port (resolves to
    /// ADDRESSES)`, in order, without repeats.
    pub fn refused_private(&self) -> Vec<String> {
        self.private
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Whether a request to `host` on `port` (`None`: the scheme's default)
    /// over HTTPS (`https`) or plain HTTP is allowed. A bare entry allows
    /// HTTPS on 443 only; plain HTTP, and any other port, needs the entry
    /// `host:port`. IPv6 literals (`[..]`) are never allowed: an entry
    /// cannot name one.
    pub fn allows(&self, host: &str, port: Option<u16>, https: bool) -> bool {
        if host.starts_with('[') {
            return false;
        }
        let port = port.unwrap_or(if https { 443 } else { 80 });
        self.hosts.iter().any(|allowed| {
            allowed.host.eq_ignore_ascii_case(host)
                && match allowed.port {
                    Some(granted) => granted == port,
                    None => https && port == 443,
                }
        })
    }

    /// `options` with every timeout capped at the call deadline.
    fn capped(&self, options: Option<RequestOptions>) -> Option<RequestOptions> {
        let Some(cap) = self.timeout_cap else {
            return options;
        };
        let options = options.unwrap_or_default();
        let cap_one = |value: Option<Duration>| Some(value.map_or(cap, |value| value.min(cap)));
        Some(RequestOptions {
            connect_timeout: cap_one(options.connect_timeout),
            first_byte_timeout: cap_one(options.first_byte_timeout),
            between_bytes_timeout: cap_one(options.between_bytes_timeout),
        })
    }
}

/// What `send_request` hands back: the response and the connection's driver.
type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

/// Add `entry` to `list` unless it is there already.
fn note_once(list: &mut Vec<String>, entry: String) {
    if !list.contains(&entry) {
        list.push(entry);
    }
}

impl WasiHttpHooks for HttpGrant {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        drop(fut);
        let uri = request.uri();
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        let Some(authority) = uri.authority() else {
            note_once(&mut self.denied, "(no host)".into());
            return Box::new(async { Err(Error::HttpRequestDenied) });
        };
        let host = authority.host().to_string();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        // Userinfo (`user@host`) is refused outright: the connection would
        // be made to the whole authority, not to the host checked here.
        if authority.as_str().contains('@') || !self.allows(&host, authority.port_u16(), https) {
            note_once(&mut self.denied, format!("{host}:{port}"));
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let options = self.capped(options);
        let whole = self.timeout_cap.unwrap_or(Duration::from_secs(600));
        let allow_private = self.allow_private;
        let private = Arc::clone(&self.private);
        Box::new(async move {
            // The look-up, the TLS handshake and the exchange up to the
            // response head get the call deadline as a whole.
            let sending = async {
                let address = match checked_address(&host, port, allow_private, whole).await {
                    Ok(address) => address,
                    Err(Refusal::Lookup(error)) => return Err(error),
                    Err(Refusal::Private(refused)) => {
                        let mut private = private.lock().unwrap_or_else(|p| p.into_inner());
                        note_once(&mut private, refused.to_string());
                        return Err(Error::DestinationIpProhibited);
                    }
                };
                send_to(request, options, address, &host).await
            };
            tokio::time::timeout(whole, sending)
                .await
                .map_err(|_| Error::ConnectionTimeout)?
        })
    }
}

/// An empty GET of `uri`, as a guest would send it.
#[cfg(test)]
fn empty_request(uri: &str) -> http::Request<WasiBody> {
    use http_body_util::BodyExt;
    http::Request::builder()
        .uri(uri)
        .body(
            http_body_util::Empty::<bytes::Bytes>::new()
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether an empty request to `uri` through `grant`'s hook is
    /// answered `HTTP-request-denied`.
    fn denied(grant: &mut HttpGrant, uri: &str) -> bool {
        let future = grant.send_request(empty_request(uri), None, Box::new(async { Ok(()) }));
        let result = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(Box::into_pin(future));
        matches!(result, Err(Error::HttpRequestDenied))
    }

    fn grant(entries: &[&str]) -> HttpGrant {
        let entries: Vec<String> = entries.iter().map(|entry| entry.to_string()).collect();
        HttpGrant::new(&entries, Duration::from_secs(30), false).unwrap()
    }

    #[test]
    fn a_bare_host_allows_only_https_on_443() {
        let grant = grant(&["api.example.com"]);
        assert!(grant.allows("api.example.com", None, true));
        assert!(grant.allows("API.Example.com", Some(443), true));
        assert!(
            !grant.allows("api.example.com", None, false),
            "no cleartext"
        );
        assert!(!grant.allows("api.example.com", Some(443), false));
        assert!(!grant.allows("api.example.com", Some(8443), true));
        assert!(!grant.allows("api.example.com", Some(80), true));
        assert!(!grant.allows("[api.example.com]", None, true));
        assert!(!grant.allows("evil.example.com", None, true));
        assert!(!grant.allows("example.com", None, true));
    }

    #[test]
    fn host_and_port_allow_exactly_that_port() {
        let grant = grant(&["127.0.0.1:8080"]);
        assert!(grant.allows("127.0.0.1", Some(8080), false));
        assert!(grant.allows("127.0.0.1", Some(8080), true));
        assert!(!grant.allows("127.0.0.1", None, false));
        assert!(!grant.allows("127.0.0.1", Some(8081), false));
        assert!(!grant.allows("localhost", Some(8080), false));
    }

    #[test]
    fn userinfo_is_refused_and_remembered() {
        let mut grant = grant(&["127.0.0.1:8080"]);
        assert!(denied(&mut grant, "http://x@127.0.0.1:8080/"));
        assert_eq!(grant.denied, vec!["127.0.0.1:8080".to_string()]);
    }

    #[test]
    fn no_entries_allow_nothing() {
        let grant = HttpGrant::default();
        assert!(!grant.allows("localhost", None, false));
    }

    #[test]
    fn bad_entries_are_named() {
        let error =
            HttpGrant::new(&["h:0".to_string()], Duration::from_secs(1), false).unwrap_err();
        assert!(error.contains("\"h:0\""), "{error}");
        assert!(HttpGrant::new(&[":80".to_string()], Duration::from_secs(1), false).is_err());
    }

    #[test]
    fn timeouts_are_capped_at_the_call_deadline() {
        let grant = grant(&["h"]);
        let capped = grant
            .capped(Some(RequestOptions {
                connect_timeout: Some(Duration::from_secs(600)),
                first_byte_timeout: Some(Duration::from_secs(5)),
                between_bytes_timeout: None,
            }))
            .unwrap();
        assert_eq!(capped.connect_timeout, Some(Duration::from_secs(30)));
        assert_eq!(capped.first_byte_timeout, Some(Duration::from_secs(5)));
        assert_eq!(capped.between_bytes_timeout, Some(Duration::from_secs(30)));
        assert_eq!(
            grant.capped(None).unwrap().connect_timeout,
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn a_refused_request_is_denied_and_remembered() {
        let mut grant = grant(&["allowed.example"]);
        for _ in 0..2 {
            assert!(denied(&mut grant, "https://other.example/v1/chat"));
        }
        assert_eq!(grant.denied, vec!["other.example:443".to_string()]);
    }
}

#[cfg(test)]
mod private_address_tests {
    use super::*;

    fn send(grant: &mut HttpGrant, uri: &str) -> Result<u16, Error> {
        let future = grant.send_request(empty_request(uri), None, Box::new(async { Ok(()) }));
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let (response, io) = Box::into_pin(future).await?;
                tokio::spawn(Box::into_pin(io));
                Ok(response.status().as_u16())
            })
    }

    /// A server on loopback that answers every request 204.
    fn loopback_server() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in listener.incoming().flatten().take(4) {
                let mut stream = stream;
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer);
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
            }
        });
        port
    }

    #[test]
    fn a_granted_name_at_a_loopback_address_is_refused_unless_allowed() {
        let port = loopback_server();
        for host in ["127.0.0.1", "localhost"] {
            let entry = format!("{host}:{port}");
            let mut grant =
                HttpGrant::new(std::slice::from_ref(&entry), Duration::from_secs(10), false)
                    .unwrap();
            let refused = send(&mut grant, &format!("http://{entry}/v1"));
            assert!(
                matches!(refused, Err(Error::DestinationIpProhibited)),
                "{refused:?}"
            );
            let noted = grant.refused_private();
            assert_eq!(noted.len(), 1, "{noted:?}");
            assert!(
                noted[0].starts_with(&format!("{entry} (resolves to ")),
                "{noted:?}"
            );
            assert!(
                grant.clone().refused_private().is_empty(),
                "a clone starts clean"
            );

            let mut allowed =
                HttpGrant::new(std::slice::from_ref(&entry), Duration::from_secs(10), true)
                    .unwrap();
            assert_eq!(
                send(&mut allowed, &format!("http://{entry}/v1")).unwrap(),
                204
            );
            assert!(allowed.refused_private().is_empty());
        }
    }
}
