//! One blocking HTTP request through `wasi:http/outgoing-handler`. The
//! host decides whether the destination is allowed (the workflow's
//! `http_hosts`); a refusal comes back as `HTTP-request-denied`.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// The parts of an `http://` or `https://` URL a request needs.
pub struct Url<'a> {
    pub https: bool,
    pub authority: &'a str,
    pub path: &'a str,
}

/// Split `url`; errors name what is wrong with it.
pub fn parse_url(url: &str) -> Result<Url<'_>, String> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(format!("{url:?} must start with http:// or https://"));
    };
    let (authority, path) = match rest.find('/') {
        Some(index) => rest.split_at(index),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(format!("{url:?} names no host"));
    }
    Ok(Url {
        https,
        authority,
        path,
    })
}

/// POST `body` to `url` with `headers`; the response status and body.
pub fn post(url: &str, headers: &[(&str, String)], body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let url = parse_url(url)?;
    let mut fields: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    fields.push(("content-length".into(), body.len().to_string().into_bytes()));
    let fields = Fields::from_list(&fields).map_err(|error| format!("bad header: {error:?}"))?;
    let request = OutgoingRequest::new(fields);
    let scheme = if url.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request
        .set_method(&Method::Post)
        .and_then(|()| request.set_scheme(Some(&scheme)))
        .and_then(|()| request.set_authority(Some(url.authority)))
        .and_then(|()| request.set_path_with_query(Some(url.path)))
        .map_err(|()| format!("the host refused the request line for {}", url.authority))?;
    let outgoing = request.body().map_err(|()| "request body taken twice")?;
    let response = outgoing_handler::handle(request, None).map_err(describe)?;
    let sent = write_body(&outgoing, body);
    let sent = sent.and_then(|()| OutgoingBody::finish(outgoing, None).map_err(describe));
    response.subscribe().block();
    let incoming = response
        .get()
        .ok_or("the response never arrived")?
        .map_err(|()| "the response was taken twice")?
        // A refused or failed request also breaks the body stream; its own
        // error says more than the stream's.
        .map_err(describe)?;
    sent?;
    let status = incoming.status();
    let body = incoming
        .consume()
        .map_err(|()| "response body taken twice")?;
    let stream = body.stream().map_err(|()| "response stream taken twice")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(error) => return Err(stream_error(error)),
        }
    }
    Ok((status, bytes))
}

/// Write all of `body` as the write permits allow, then flush.
fn write_body(outgoing: &OutgoingBody, body: &[u8]) -> Result<(), String> {
    {
        let stream = outgoing
            .write()
            .map_err(|()| "request stream taken twice")?;
        let ready = stream.subscribe();
        let mut rest = body;
        while !rest.is_empty() {
            ready.block();
            let permit = stream.check_write().map_err(stream_error)? as usize;
            let (chunk, tail) = rest.split_at(permit.min(rest.len()));
            stream.write(chunk).map_err(stream_error)?;
            rest = tail;
        }
        // Once the last byte is written the host may close the stream as
        // soon as the declared content-length is sent: closed is done.
        let flushed = stream.flush().and_then(|()| {
            ready.block();
            stream.check_write().map(drop)
        });
        match flushed {
            Ok(()) | Err(StreamError::Closed) => {}
            Err(error) => return Err(stream_error(error)),
        }
    }
    Ok(())
}

fn describe(error: ErrorCode) -> String {
    match error {
        ErrorCode::HttpRequestDenied => "HTTP request denied by the host".into(),
        other => format!("HTTP error: {other:?}"),
    }
}

fn stream_error(error: StreamError) -> String {
    match error {
        StreamError::Closed => "the stream closed early".into(),
        StreamError::LastOperationFailed(error) => error.to_debug_string(),
    }
}
