//! The database password kept out of everything the tool prints.

/// The password in `url` (user info, or a `password=` query parameter), if any.
pub(crate) fn password(url: &str) -> Option<String> {
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=') {
                if key.eq_ignore_ascii_case("password") && !value.is_empty() {
                    return Some(value.to_string());
                }
            }
        }
    }
    let authority = url.split_once("://")?.1;
    let authority = &authority[..authority.find(['/', '?', '#']).unwrap_or(authority.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then(|| password.to_string())
}

/// `url` with its password as `***`.
pub(crate) fn url(url: &str) -> String {
    scrub(url, url)
}

/// `text` with every occurrence of the password of `url` (as written, and
/// percent-decoded) replaced by `***`.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    let Some(password) = password(url) else {
        return text.to_string();
    };
    let mut out = text.replace(&password, "***");
    let decoded = percent_decoded(&password);
    if decoded != password && !decoded.is_empty() {
        out = out.replace(&decoded, "***");
    }
    out
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_and_hidden() {
        assert_eq!(
            url("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(url("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(
            url("postgres://h/db?user=u&password=pw"),
            "postgres://h/db?user=u&password=***"
        );
        assert_eq!(
            scrub("bad p@ss here", "mysql://u:p%40ss@h/db"),
            "bad *** here"
        );
        assert_eq!(url("sqlite:app.db"), "sqlite:app.db");
    }
}
