//! Outgoing HTTP of workflow plugins (`wasi:http/outgoing-handler`), gated
//! by the workflow's `http_hosts` grant.
//!
//! A plugin reaches a host only when an entry allows it: `host` allows
//! HTTPS on port 443, `host:port` exactly that port (HTTP or HTTPS). Names
//! compare case-insensitively and are never resolved before the check, so a
//! grant for `api.example.com` does not open whatever else shares its
//! address (and a granted name that resolves to a private address is
//! reached: grant names you trust). Authorities with userinfo and IPv6
//! literals are refused. Anything else is answered with the `wasi:http`
//! error `HTTP-request-denied` and remembered, so a failed step can say
//! which destination was refused.
//!
//! Requests are sent by wasmtime-wasi-http's client (hyper; HTTPS through
//! rustls with the webpki roots). While the guest waits on a response the
//! host is blocked outside the guest, where the epoch deadline cannot fire,
//! so every timeout of a request (connect, first byte, between bytes) is
//! capped at the plugin's call deadline, and so is the whole exchange up to
//! the response head (the TLS handshake has no timeout of its own).

use std::time::Duration;

use http::uri::Scheme;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// One `http_hosts` entry: a lowercase name and, optionally, the one port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AllowedHost {
    host: String,
    port: Option<u16>,
}

/// The outgoing-HTTP grant of one plugin instance: the hosts it may reach,
/// the cap on each request's timeouts, and the destinations it was refused.
#[derive(Clone, Debug, Default)]
pub struct HttpGrant {
    hosts: Vec<AllowedHost>,
    timeout_cap: Option<Duration>,
    /// `host:port` of every refused request of the current step, in order,
    /// without repeats.
    pub denied: Vec<String>,
}

impl HttpGrant {
    /// A grant for `entries` (`host` or `host:port`, as checked by the
    /// workflow config) with every request timeout capped at
    /// `call_timeout_secs`. Errors name the entry that is not `host` or
    /// `host:port` with a port from 1 to 65535.
    pub fn new(entries: &[String], call_timeout_secs: f64) -> Result<Self, String> {
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
            timeout_cap: (call_timeout_secs.is_finite() && call_timeout_secs > 0.0)
                .then(|| Duration::from_secs_f64(call_timeout_secs)),
            denied: Vec::new(),
        })
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
        // Userinfo (`user@host`) is refused outright: the connection would
        // be made to the whole authority, not to the host checked here.
        let allowed = uri.authority().is_some_and(|authority| {
            !authority.as_str().contains('@')
                && self.allows(authority.host(), authority.port_u16(), https)
        });
        if !allowed {
            let shown = uri.authority().map_or_else(
                || "(no host)".to_string(),
                |authority| {
                    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
                    format!("{}:{port}", authority.host())
                },
            );
            if !self.denied.contains(&shown) {
                self.denied.push(shown);
            }
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let options = self.capped(options);
        let cap = self.timeout_cap;
        Box::new(async move {
            use http_body_util::BodyExt;
            let send = wasmtime_wasi_http::default_send_request(request, options);
            // The TLS handshake has no timeout of its own: the whole send,
            // up to the response head, gets the call deadline too.
            let (response, io) = match cap {
                Some(cap) => tokio::time::timeout(cap, send)
                    .await
                    .map_err(|_| Error::ConnectionTimeout)??,
                None => send.await?,
            };
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether an empty request to `uri` through `grant`'s hook is
    /// answered `HTTP-request-denied`.
    fn denied(grant: &mut HttpGrant, uri: &str) -> bool {
        use http_body_util::BodyExt;
        let request = http::Request::builder()
            .uri(uri)
            .body(
                http_body_util::Empty::<bytes::Bytes>::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .unwrap();
        let future = grant.send_request(request, None, Box::new(async { Ok(()) }));
        let result = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(Box::into_pin(future));
        matches!(result, Err(Error::HttpRequestDenied))
    }

    fn grant(entries: &[&str]) -> HttpGrant {
        let entries: Vec<String> = entries.iter().map(|entry| entry.to_string()).collect();
        HttpGrant::new(&entries, 30.0).unwrap()
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
        let error = HttpGrant::new(&["h:0".to_string()], 1.0).unwrap_err();
        assert!(error.contains("\"h:0\""), "{error}");
        assert!(HttpGrant::new(&[":80".to_string()], 1.0).is_err());
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
