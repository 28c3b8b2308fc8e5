//! Human output: tables with aligned columns, and text made safe for a terminal.

/// `text` with what a terminal would act on shown as escapes instead: control characters
/// (newlines, tabs, ESC sequences, NUL) and the invisible bidirectional controls that
/// could make a line read differently from what it holds (U+202E and the like). Stored
/// errors and arguments come from anywhere; printed raw, they could rewrite the screen.
pub(crate) fn safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_bidi_control(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` made safe and cut to `max` characters, ending with `…` when cut.
pub(crate) fn cell(text: &str, max: usize) -> String {
    let safe = safe(text);
    if safe.chars().count() <= max {
        return safe;
    }
    let mut cut: String = safe.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A table: a header row and rows of cells (already made safe), columns padded to the
/// widest cell, the last column not padded.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.extend(std::iter::repeat(' ').take(pad + 2));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(
            safe("a\nb\u{1b}[2J\u{202e}c\0"),
            "a\\u{a}b\\u{1b}[2J\\u{202e}c\\u{0}"
        );
        assert_eq!(safe("ünï 🎉"), "ünï 🎉");
        assert_eq!(cell("abcdef", 4), "abc…");
    }

    #[test]
    fn columns_line_up() {
        let t = table(
            &["ID", "NAME"],
            &[vec!["1".into(), "x".into()], vec!["100".into(), "y".into()]],
        );
        assert_eq!(t, "ID   NAME\n1    x\n100  y\n");
    }
}
