//! Text the runtime stores (error messages, the trace JSON), made acceptable to every
//! backend and capped where the runtime builds it, so that no store refuses it and no
//! body can fill the database with one error.
//!
//! What the backends refuse in text, as the migrations declare it: PostgreSQL refuses the
//! NUL character (SQLSTATE 22021); MySQL/MariaDB columns are `utf8mb4`, which holds every
//! Unicode scalar value (a `utf8`/`utf8mb3` column would refuse characters beyond U+FFFF,
//! but none is declared); SQLite stores anything. A Rust `String` holds no invalid UTF-8
//! and no lone surrogate, so NUL is the one character to replace.

use std::borrow::Cow;

/// The most bytes of one stored text, the cut marker included.
pub(crate) const MAX_STORED_TEXT: usize = 8 * 1024;

/// What stands in for a character a backend refuses.
const REPLACEMENT: char = '\u{FFFD}';

/// `text` sanitized and capped at [`MAX_STORED_TEXT`] bytes: what the runtime stores.
pub(crate) fn stored(text: &str) -> String {
    capped(&sanitized(text), MAX_STORED_TEXT)
}

/// `text` with every character a backend refuses (NUL) replaced by U+FFFD.
pub(crate) fn sanitized(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', &REPLACEMENT.to_string()))
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` cut to at most `max` bytes (when `max` is longer than the marker) on a character
/// boundary, ending with a marker that says how many bytes were left out
/// (`… [cut: 12345 more bytes]`); unchanged when it fits.
pub(crate) fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    // The marker is longest when the count has as many digits as the whole length.
    let room = max.saturating_sub(cut_marker(text.len()).len());
    let kept = floor_char_boundary(text, room);
    let mut out = String::with_capacity(max);
    out.push_str(&text[..kept]);
    out.push_str(&cut_marker(text.len() - kept));
    out
}

fn cut_marker(cut_bytes: usize) -> String {
    format!("… [cut: {cut_bytes} more bytes]")
}

/// The largest index `<= at` that is a character boundary of `text`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    (0..=at)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_replaced_and_the_rest_kept() {
        assert_eq!(stored("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert!(matches!(sanitized("plain"), Cow::Borrowed("plain")));
        assert_eq!(stored("emoji 🦀 stays"), "emoji 🦀 stays");
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary_with_a_marker() {
        let text = format!("x{}", "é".repeat(10_000));
        let out = stored(&text);
        assert!(out.len() <= MAX_STORED_TEXT, "{} bytes", out.len());
        let (kept, marker) = out.split_once("… [cut: ").unwrap();
        assert!(text.starts_with(kept));
        let cut: usize = marker
            .strip_suffix(" more bytes]")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(kept.len() + cut, text.len());
        assert!(kept.len() >= MAX_STORED_TEXT - 40);
    }

    #[test]
    fn text_that_fits_is_unchanged() {
        let text = "y".repeat(MAX_STORED_TEXT);
        assert_eq!(capped(&text, MAX_STORED_TEXT), text);
        assert_eq!(capped("", 0), "");
        assert_eq!(capped("abc", 2).len(), "… [cut: 3 more bytes]".len());
    }
}
