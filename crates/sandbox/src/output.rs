//! Bounded capture of what a guest prints: stdout, stderr and the `log`
//! import share one byte budget per call; the excess is dropped and counted,
//! never trapped on.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use serde::Serialize;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// What one call printed, in the order it was printed.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct CallOutput {
    /// Captured chunks; consecutive writes to one stream are merged.
    pub entries: Vec<OutputEntry>,
    /// Bytes dropped after the budget ran out.
    pub dropped_bytes: u64,
}

impl CallOutput {
    /// True when nothing was printed or dropped.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.dropped_bytes == 0
    }
}

/// One captured chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputEntry {
    /// `stdout`, `stderr`, or `log`.
    pub stream: &'static str,
    /// Log level for `log` entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<&'static str>,
    /// The text, lossily decoded as UTF-8.
    pub text: String,
}

#[derive(Debug, Default)]
struct Buffer {
    budget: usize,
    used: usize,
    output: CallOutput,
}

/// A shared, bounded capture buffer for one instance.
#[derive(Clone, Debug)]
pub struct Capture(Arc<Mutex<Buffer>>);

impl Capture {
    /// A capture keeping at most `budget` bytes per call.
    pub fn new(budget: usize) -> Self {
        Self(Arc::new(Mutex::new(Buffer {
            budget,
            ..Buffer::default()
        })))
    }

    /// Append `bytes` to `stream` within the budget; returns bytes kept.
    pub fn push(&self, stream: &'static str, level: Option<&'static str>, bytes: &[u8]) -> usize {
        let mut buffer = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        let room = buffer.budget.saturating_sub(buffer.used);
        let kept = bytes.len().min(room);
        buffer.output.dropped_bytes += (bytes.len() - kept) as u64;
        if kept == 0 {
            return 0;
        }
        buffer.used += kept;
        let text = String::from_utf8_lossy(&bytes[..kept]);
        match buffer.output.entries.last_mut() {
            Some(last) if level.is_none() && last.stream == stream && last.level.is_none() => {
                last.text.push_str(&text)
            }
            _ => buffer.output.entries.push(OutputEntry {
                stream,
                level,
                text: text.into_owned(),
            }),
        }
        kept
    }

    /// Take what was captured since the last call and reset the budget.
    pub fn take(&self) -> CallOutput {
        let mut buffer = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        buffer.used = 0;
        std::mem::take(&mut buffer.output)
    }

    /// A WASI stdout/stderr stream writing into this capture.
    pub fn stream(&self, stream: &'static str) -> CaptureStream {
        CaptureStream {
            capture: self.clone(),
            stream,
        }
    }
}

/// One of the guest's standard streams, captured. Writes never fail: the
/// excess over the budget is dropped and counted.
#[derive(Clone, Debug)]
pub struct CaptureStream {
    capture: Capture,
    stream: &'static str,
}

impl IsTerminal for CaptureStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CaptureStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Pollable for CaptureStream {
    async fn ready(&mut self) {}
}

impl OutputStream for CaptureStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.capture.push(self.stream, None, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for CaptureStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.capture.push(self.stream, None, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_shared_and_excess_counted() {
        let capture = Capture::new(10);
        assert_eq!(capture.push("stdout", None, b"hello "), 6);
        assert_eq!(capture.push("stdout", None, b"world"), 4);
        assert_eq!(capture.push("log", Some("info"), b"x"), 0);
        let output = capture.take();
        assert_eq!(output.entries.len(), 1);
        assert_eq!(output.entries[0].text, "hello worl");
        assert_eq!(output.dropped_bytes, 2);
        assert_eq!(
            capture.push("stderr", None, b"again"),
            5,
            "budget resets per call"
        );
    }
}
