//! Secrets kept out of logs, `Debug` output and error messages.

/// The URL with its password (user info, or a `password=` query parameter) replaced by
/// `***`.
pub(crate) fn url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| authority_start + i);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let userinfo = &out[authority_start..authority_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = authority_start + colon + 1;
                out.replace_range(start..authority_start + at, "***");
            }
        }
    }
    if let Some(query_start) = out.find('?') {
        let (head, query) = out.split_at(query_start + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::url;

    #[test]
    fn passwords_are_hidden_and_the_rest_kept() {
        assert_eq!(url("postgres://u:p@h:1/db"), "postgres://u:***@h:1/db");
        assert_eq!(
            url("mysql://root@127.0.0.1/test"),
            "mysql://root@127.0.0.1/test"
        );
        assert_eq!(
            url("postgres://h/db?user=u&password=p&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(url("mysql://u:p%40ss@h/db"), "mysql://u:***@h/db");
        assert_eq!(url("sqlite:app.db"), "sqlite:app.db");
    }
}
