//! `sandloop loop serve`'s HTTP face: the [`Endpoints`] served on hyper
//! (HTTP/1.1), many connections at once, so one slow or stalled client
//! never delays another.
//!
//! Every connection holds one of [`ServeOptions::max_connections`] permits
//! (further clients wait in the listen backlog); its request head must
//! arrive within [`ServeOptions::header_timeout`] and its body within
//! [`ServeOptions::body_timeout`], or the connection is closed (a body that
//! stalls is answered 408 first). A body longer than
//! [`ServeOptions::max_body_bytes`] is answered 413 with a JSON reason
//! naming both sizes; up to [`DISCARD_BYTES`] of it are read and thrown
//! away first (within the body deadline), so a client still sending gets
//! the answer rather than a reset connection. With a [`Token`], every request must carry
//! `Authorization: Bearer TOKEN` (401 otherwise, before its body is read).
//! With TLS, the handshake counts against the header deadline.
//!
//! The coordinator's calls (file reads and atomic writes under the state
//! lock) run on tokio's blocking pool. [`Shutdown::trigger`] stops
//! accepting, lets every open request finish — a state write in progress
//! completes — and returns once they have, or after
//! [`ServeOptions::drain_timeout`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, watch};

use super::auth::Token;
use super::endpoints::{Endpoints, Reply};
use super::models::MAX_REPORT_BYTES;

/// How `loop serve` serves. [`ServeOptions::default`] gives the documented
/// defaults, with no token and no TLS.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Required bearer token; `None` serves without authentication (which
    /// the CLI allows on loopback addresses only).
    pub token: Option<Token>,
    /// TLS configuration ([`tls_config`]); `None` serves plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Longest time from a connection's start (or its previous response)
    /// to the end of a request's head, TLS handshake included. Default 10 s.
    pub header_timeout: Duration,
    /// Longest time to read a request's body once its head arrived.
    /// Default 30 s.
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog until
    /// one ends (an idle or stalled one ends at its header or body
    /// deadline). Default 1024.
    pub max_connections: usize,
    /// Largest request body read, bytes. Default [`MAX_REPORT_BYTES`], the
    /// limit a `loop worker` fits its reports to.
    pub max_body_bytes: usize,
    /// After a shutdown, how long open requests may take to finish.
    /// Default 30 s.
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            token: None,
            tls: None,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_body_bytes: MAX_REPORT_BYTES,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound or resolved.
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        /// The address as given.
        listen: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key file could not be read or used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The async runtime could not be started.
    #[error("cannot start the server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Asks a running [`serve`] to stop; cheap to clone, usable from any
/// thread (a Ctrl-C handler).
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }
}

impl Shutdown {
    /// A shutdown not yet triggered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stop accepting connections and let open requests finish.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// Bind `listen` (`HOST:PORT`) now, so a serve that cannot start says so
/// before any loop state is written.
pub fn bind(listen: &str) -> Result<std::net::TcpListener, ServeError> {
    let listener = std::net::TcpListener::bind(listen).map_err(|source| ServeError::Listen {
        listen: listen.to_string(),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ServeError::Listen {
            listen: listen.to_string(),
            source,
        })?;
    Ok(listener)
}

/// Whether every address `listen` resolves to is a loopback address
/// (`127.0.0.0/8`, `::1`, `localhost`): only there may `loop serve` run
/// without a token.
///
/// # Errors
/// `listen` is not `HOST:PORT`, or its host does not resolve.
pub fn is_loopback(listen: &str) -> std::io::Result<bool> {
    use std::net::ToSocketAddrs;
    let addresses: Vec<SocketAddr> = listen.to_socket_addrs()?.collect();
    Ok(!addresses.is_empty() && addresses.iter().all(|a| a.ip().is_loopback()))
}

/// Refuse to serve `listen` (`HOST:PORT`) without a token unless it is a
/// loopback address: anyone who can reach it could register as a worker
/// and read the loop. `repo` is the loop's repository, named in how to
/// make a token.
///
/// # Errors
/// The refusal, saying how to make and use a token; or `listen` is not
/// `HOST:PORT`.
pub fn check_exposure(listen: &str, has_token: bool, repo: &Path) -> Result<(), String> {
    let loopback = is_loopback(listen).map_err(|error| {
        format!("--listen {listen:?}: {error} (expected HOST:PORT, e.g. 127.0.0.1:8080)")
    })?;
    if has_token || loopback {
        return Ok(());
    }
    Err(format!(
        "refusing to serve on {listen} without a token: anyone who can reach it could register \
         as a worker, read the goal, config and history, and report results. Create one with \
         `sandloop loop token --repo {repo}` and serve with `--token-file {path}` (workers pass \
         the same file), or listen on 127.0.0.1",
        repo = repo.display(),
        path = crate::auth::default_token_file(repo).display()
    ))
}

/// The PEM certificates in `path`, at least one: a server's chain
/// (`--tls-cert`) or what a worker trusts (`--ca-file`). The error says
/// what is wrong, without the path.
pub(crate) fn pem_certificates(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect())
        .map_err(|error| error.to_string())?;
    if certificates.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certificates)
}

/// The TLS configuration of a server with the certificate chain in
/// `cert` and the private key in `key` (PEM files, e.g. from certbot or
/// `openssl req -x509`). Errors name the file.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let named = |path: &Path, what: &str, error: &dyn std::fmt::Display| {
        ServeError::Tls(format!("{} ({what}): {error}", path.display()))
    };
    let chain = pem_certificates(cert).map_err(|error| named(cert, "--tls-cert", &error))?;
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|error| named(key, "--tls-key", &error))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| ServeError::Tls(error.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|error| {
            ServeError::Tls(format!(
                "{} and {} do not make a certificate and its key: {error}",
                cert.display(),
                key.display()
            ))
        })?;
    Ok(Arc::new(config))
}

/// What every connection shares.
struct Shared {
    endpoints: Arc<Endpoints>,
    options: ServeOptions,
}

/// Serve `endpoints` on `listener` (from [`bind`]) until `shutdown` is
/// triggered; returns once open requests have finished (or
/// [`ServeOptions::drain_timeout`] ran out).
pub fn serve(
    endpoints: Arc<Endpoints>,
    listener: std::net::TcpListener,
    options: ServeOptions,
    shutdown: &Shutdown,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("loop-serve")
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Runtime)?;
    let mut stop = shutdown.subscribe();
    runtime.block_on(async move {
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|source| ServeError::Listen {
                listen: "the bound address".into(),
                source,
            })?;
        let permits = Arc::new(Semaphore::new(options.max_connections));
        let drain_timeout = options.drain_timeout;
        let max = options.max_connections;
        let shared = Arc::new(Shared { endpoints, options });
        loop {
            let permit = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => permit.expect("never closed"),
                _ = stopped(&mut stop) => break,
            };
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        // Out of descriptors and the like: wait a moment
                        // rather than spin.
                        tracing::warn!("loop serve: cannot accept a connection: {error}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = stopped(&mut stop) => break,
            };
            let _ = stream.set_nodelay(true);
            let shared = Arc::clone(&shared);
            let stop = shutdown.subscribe();
            tokio::spawn(async move {
                connection(stream, shared, stop).await;
                drop(permit);
            });
        }
        // Every permit back means every connection has ended.
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        if tokio::time::timeout(drain_timeout, permits.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!(
                "loop serve: requests still open after {}s; stopping without them",
                drain_timeout.as_secs()
            );
        }
        Ok(())
    })
}

/// Resolves once the shutdown has been triggered (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// One connection: TLS if configured (within the header deadline), then
/// HTTP/1.1 until the client leaves, a deadline passes or the server
/// stops.
async fn connection(
    stream: tokio::net::TcpStream,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    match shared.options.tls.clone() {
        None => http(stream, shared, stop).await,
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            match tokio::time::timeout(shared.options.header_timeout, acceptor.accept(stream)).await
            {
                Ok(Ok(tls)) => http(tls, shared, stop).await,
                Ok(Err(error)) => tracing::debug!("loop serve: TLS handshake failed: {error}"),
                Err(_) => tracing::debug!("loop serve: TLS handshake timed out"),
            }
        }
    }
}

async fn http<I>(io: I, shared: Arc<Shared>, mut stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = {
        let shared = Arc::clone(&shared);
        hyper::service::service_fn(move |request| {
            let shared = Arc::clone(&shared);
            async move { Ok::<_, Infallible>(answer(request, &shared).await) }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.options.header_timeout)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!("loop serve: connection ended: {error}");
            }
        }
        _ = stopped(&mut stop) => {
            // Finish the request in progress, then close.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// `reply` as an HTTP response (its body is JSON).
fn response(reply: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// [`Reply::error`] as an HTTP response.
fn error_response(status: u16, message: &str) -> Response<Full<Bytes>> {
    response(Reply::error(status, message))
}

/// 413 for a body of `size` bytes (`None`: it kept coming past the limit).
fn too_large(size: Option<u64>, limit: usize) -> Response<Full<Bytes>> {
    let size_text = size.map_or_else(
        || format!("more than {limit} bytes"),
        |size| format!("{size} bytes"),
    );
    let error = format!(
        "the request body is {size_text}; this coordinator reads at most {limit} bytes \
         (a sandloop loop worker cuts its step text to fit)"
    );
    response(Reply::json(
        413,
        &serde_json::json!({"error": error, "size_bytes": size, "limit_bytes": limit}),
    ))
}

async fn answer(request: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let options = &shared.options;
    if let Some(token) = &options.token {
        let offered = request
            .headers()
            .get(AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if !token.accepts(offered) {
            let mut response = error_response(
                401,
                "this coordinator requires `Authorization: Bearer TOKEN` with its token \
                 (sandloop loop worker --token-file FILE)",
            );
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    let endpoint = match (request.method(), request.uri().path()) {
        (&Method::POST, "/register") => Endpoint::Register,
        (&Method::POST, "/finished") => Endpoint::Finished,
        (&Method::GET, "/status") => Endpoint::Status,
        (_, path @ ("/register" | "/finished" | "/status")) => {
            let allowed = if path == "/status" { "GET" } else { "POST" };
            let mut response = error_response(405, &format!("{path} takes {allowed}"));
            response
                .headers_mut()
                .insert("allow", HeaderValue::from_static(allowed));
            return response;
        }
        (_, path) => {
            return error_response(
                404,
                &format!(
                    "no such endpoint {path}; use POST /register, POST /finished or GET /status"
                ),
            );
        }
    };
    let limit = options.max_body_bytes;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|size| size > limit as u64) {
        discard(request.into_body(), options.body_timeout).await;
        return too_large(declared, limit);
    }
    let mut incoming = request.into_body();
    let body = match tokio::time::timeout(options.body_timeout, read_body(&mut incoming, limit))
        .await
    {
        Err(_) => {
            return error_response(
                408,
                &format!(
                    "the request body did not arrive within {}s",
                    options.body_timeout.as_secs()
                ),
            );
        }
        Ok(Err(BodyError::TooLong)) => {
            discard(incoming, options.body_timeout).await;
            return too_large(None, limit);
        }
        Ok(Err(BodyError::Read(error))) => {
            return error_response(400, &format!("the request body could not be read: {error}"));
        }
        Ok(Ok(body)) => body,
    };
    let endpoints = Arc::clone(&shared.endpoints);
    let reply = tokio::task::spawn_blocking(move || match endpoint {
        Endpoint::Register => endpoints.register(&body),
        Endpoint::Finished => endpoints.finished(&body),
        Endpoint::Status => endpoints.status(),
    })
    .await;
    match reply {
        Ok(reply) => response(reply),
        Err(error) => error_response(500, &format!("the coordinator failed: {error}")),
    }
}

/// Why a request body was not read whole.
enum BodyError {
    /// It went past the limit.
    TooLong,
    /// The connection failed mid-body.
    Read(hyper::Error),
}

/// The whole of `body`, at most `limit` bytes of it.
async fn read_body(body: &mut Incoming, limit: usize) -> Result<Bytes, BodyError> {
    let mut collected = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Some(data) = frame.data_ref() {
            if collected.len() + data.len() > limit {
                return Err(BodyError::TooLong);
            }
            collected.extend_from_slice(data);
        }
    }
    Ok(Bytes::from(collected))
}

/// How much of a refused body is read and thrown away before the 413, so
/// that a client still sending it reads the answer instead of a reset
/// (closing a socket with unread input resets it). Beyond this the
/// connection is closed at once.
pub const DISCARD_BYTES: u64 = 16 * 1024 * 1024;

/// Reads and drops what is left of `body`: to its end, [`DISCARD_BYTES`],
/// the first error or `deadline`, whichever comes first.
async fn discard(mut body: Incoming, deadline: Duration) {
    let drain = async {
        let mut read = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, |data| data.len() as u64);
            if read > DISCARD_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(deadline, drain).await;
}

#[derive(Clone, Copy)]
enum Endpoint {
    Register,
    Finished,
    Status,
}
