//! Levelled log lines through the host's `log` import, captured per item
//! into the run directory. Lines beyond the host's per-call budget are
//! dropped and counted by the host.
//!
//! Functions take a finished message; the macros format like `format!`:
//!
//! ```ignore
//! sandloop_guest::log::info("prepared");
//! sandloop_guest::log::warn!("{} headings skipped", n);
//! ```
//!
//! Outside a component (native unit tests) lines go to stderr.

pub use crate::wit::log::Level;

/// Record one line at `level`.
pub fn write(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::wit::log::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Record one `trace` line.
pub fn trace(message: &str) {
    write(Level::Trace, message)
}
/// Record one `debug` line.
pub fn debug(message: &str) {
    write(Level::Debug, message)
}
/// Record one `info` line.
pub fn info(message: &str) {
    write(Level::Info, message)
}
/// Record one `warn` line.
pub fn warn(message: &str) {
    write(Level::Warn, message)
}
/// Record one `error` line.
pub fn error(message: &str) {
    write(Level::Error, message)
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::write($crate::log::Level::$level, &::std::format!($($arg)+))
    };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_log_trace {
    ($($arg:tt)+) => { $crate::__sandloop_log!(Trace, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_log_debug {
    ($($arg:tt)+) => { $crate::__sandloop_log!(Debug, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_log_info {
    ($($arg:tt)+) => { $crate::__sandloop_log!(Info, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_log_warn {
    ($($arg:tt)+) => { $crate::__sandloop_log!(Warn, $($arg)+) };
}
#[doc(hidden)]
#[macro_export]
macro_rules! __sandloop_log_error {
    ($($arg:tt)+) => { $crate::__sandloop_log!(Error, $($arg)+) };
}

/// `debug!("fmt", args..)`: format and record a `debug` line.
#[doc(inline)]
pub use crate::__sandloop_log_debug as debug;
/// `error!("fmt", args..)`: format and record an `error` line.
#[doc(inline)]
pub use crate::__sandloop_log_error as error;
/// `info!("fmt", args..)`: format and record an `info` line.
#[doc(inline)]
pub use crate::__sandloop_log_info as info;
/// `trace!("fmt", args..)`: format and record a `trace` line.
#[doc(inline)]
pub use crate::__sandloop_log_trace as trace;
/// `warn!("fmt", args..)`: format and record a `warn` line.
#[doc(inline)]
pub use crate::__sandloop_log_warn as warn;
