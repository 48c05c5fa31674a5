//! The CLI's diagnostics: what the host crates report through `tracing`
//! (warnings, progress of a loop) goes to stderr, filtered by `RUST_LOG`
//! (default `info`, warnings only from the NATS client; e.g. `RUST_LOG=warn` keeps only warnings,
//! `RUST_LOG=info,sandloop_loop=debug` shows the coordinator's details).
//!
//! Lines read as the CLI's own messages always have: `warning: …` and
//! `error: …` for those levels, the message alone for `info`, and the
//! level and module for `debug` and `trace`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats an event as the CLI's own stderr messages are formatted.
struct CliFormat;

impl<S, N> FormatEvent<S, N> for CliFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        match *metadata.level() {
            Level::ERROR => write!(writer, "error: ")?,
            Level::WARN => write!(writer, "warning: ")?,
            Level::INFO => {}
            level => write!(
                writer,
                "{}: {}: ",
                level.as_str().to_lowercase(),
                metadata.target()
            )?,
        }
        // The fields may carry plugin, adapter or coordinator text: format
        // them aside, then write them with control characters escaped.
        let mut fields = String::new();
        context.format_fields(Writer::new(&mut fields), event)?;
        writeln!(writer, "{}", sandloop_core::terminal::for_terminal(&fields))
    }
}

/// The filter without `RUST_LOG`: `info`, but only warnings of the NATS
/// client (its connection chatter is not the CLI's to show).
const DEFAULT_FILTER: &str = "info,async_nats=warn";

/// Install the stderr subscriber once, at the start of `main`. A `RUST_LOG`
/// that does not parse falls back to `info` with a warning, rather than
/// silencing everything.
pub fn init() {
    let (filter, bad) = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => match EnvFilter::try_new(&text) {
            Ok(filter) => (filter, None),
            Err(error) => (
                EnvFilter::new(DEFAULT_FILTER),
                Some(format!("RUST_LOG={text:?}: {error}")),
            ),
        },
        _ => (EnvFilter::new(DEFAULT_FILTER), None),
    };
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(CliFormat)
        .try_init()
        .is_ok();
    if let (true, Some(bad)) = (installed, bad) {
        tracing::warn!("{bad}; showing info and above");
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::CliFormat;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn levels_read_as_the_clis_own_messages_and_the_filter_applies() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(move || writer.clone())
            .event_format(CliFormat)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!("cannot rename {}: gone", "a.json");
            tracing::info!("sandloop loop: resuming session s1");
            tracing::error!("broken");
            tracing::warn!("step said {}", "\u{1b}]0;title\u{7}\u{1b}[2J\u{9b}31mdone");
            tracing::debug!("not shown at info");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "warning: cannot rename a.json: gone\nsandloop loop: resuming session s1\nerror: broken\n\
             warning: step said \\x1b]0;title\\x07\\x1b[2J\\u{9b}31mdone\n"
        );
    }
}
