//! The one place that says where the runtime logs: every event and span it emits has the
//! `tracing` target [`LOG_TARGET`] (`async_exec`), whichever module it comes from, so that
//! `RUST_LOG=async_exec=debug` (an `EnvFilter` directive) selects all of it and nothing
//! else. The runtime logs through these macros, never `tracing::warn!` and the like
//! directly (a test in `tests/logging.rs` refuses those).

/// The `tracing` target of everything the runtime logs: events and the `async_exec` span
/// each execution runs in.
///
/// Filter on it with `RUST_LOG=async_exec=debug` (`tracing_subscriber::EnvFilter`), or
/// `Targets::new().with_target(async_exec::LOG_TARGET, LevelFilter::DEBUG)`.
///
/// ```
/// assert_eq!(async_exec::LOG_TARGET, "async_exec");
/// ```
pub const LOG_TARGET: &str = "async_exec";

macro_rules! error {
    ($($arg:tt)+) => { ::tracing::error!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! warn_ {
    ($($arg:tt)+) => { ::tracing::warn!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! info {
    ($($arg:tt)+) => { ::tracing::info!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! debug {
    ($($arg:tt)+) => { ::tracing::debug!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

macro_rules! info_span {
    ($($arg:tt)+) => { ::tracing::info_span!(target: $crate::log::LOG_TARGET, $($arg)+) };
}

// `warn` is also a built-in attribute: defined under another name, used by its path.
pub(crate) use {debug, error, info, info_span, warn_ as warn};

/// Text from outside the runtime (an error's message, a body's panic, a name read from a
/// record) as a log field, `error = %crate::log::escaped(&error)`: its control characters
/// (and the Unicode line separators and bidirectional controls) are written escaped
/// (`\n`, `\r`, `\u{1b}`, `\u{202e}`), so that it can neither end its line and start a
/// forged one, nor reach a terminal as an escape sequence.
pub(crate) fn escaped<T: std::fmt::Display>(text: T) -> Escaped<T> {
    Escaped(text)
}

/// See [`escaped`].
#[derive(Debug)]
pub(crate) struct Escaped<T>(T);

/// Whether `c` is written escaped: control characters, line and paragraph separators,
/// bidirectional embeddings, overrides and isolates.
fn escapes(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

impl<T: std::fmt::Display> std::fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// Passes text on, its characters that [`escapes`] says written escaped.
        struct Escaping<'a, 'b>(&'a mut std::fmt::Formatter<'b>);
        impl std::fmt::Write for Escaping<'_, '_> {
            fn write_str(&mut self, text: &str) -> std::fmt::Result {
                let mut rest = text;
                while let Some(at) = rest.find(escapes) {
                    self.0.write_str(&rest[..at])?;
                    let c = rest[at..].chars().next().unwrap_or_default();
                    write!(self.0, "{}", c.escape_default())?;
                    rest = &rest[at + c.len_utf8()..];
                }
                self.0.write_str(rest)
            }
        }
        std::fmt::Write::write_fmt(&mut Escaping(f), format_args!("{}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::escaped;

    #[test]
    fn control_characters_are_written_escaped() {
        let text = "boom\nINFO forged\r\u{1b}[31mred\t\u{202e}é\u{2028}";
        assert_eq!(
            escaped(text).to_string(),
            r"boom\nINFO forged\r\u{1b}[31mred\t\u{202e}é\u{2028}"
        );
        assert_eq!(escaped("plain text, é").to_string(), "plain text, é");
        let error = std::io::Error::other("line one\nline two");
        assert_eq!(escaped(&error).to_string(), r"line one\nline two");
    }
}
