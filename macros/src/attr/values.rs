//! The values of `#[async_exec(...)]`'s arguments: the parser and limits of each
//! value, the error for an unknown key, and the search for `crate = "..."` in arguments
//! that failed to parse.

use proc_macro2::TokenTree;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Ident, LitInt, LitStr};

use super::{KEYS, STRATEGIES};

/// Finds `crate = "path"` in arguments that failed to parse, so that the stub
/// emitted next to the errors names the right crate.
pub(crate) fn find_crate_path(args: &proc_macro2::TokenStream) -> Option<syn::Path> {
    let tokens: Vec<TokenTree> = args.clone().into_iter().collect();
    tokens.windows(3).find_map(|w| match w {
        [TokenTree::Ident(key), TokenTree::Punct(eq), TokenTree::Literal(lit)]
            if key == "crate" && eq.as_char() == '=' =>
        {
            syn::parse2::<LitStr>(lit.to_token_stream())
                .ok()?
                .parse_with(syn::Path::parse_mod_style)
                .ok()
        }
        _ => None,
    })
}

/// The error for a key that is not in [`KEYS`].
pub(super) fn unknown_key(key: &Ident) -> syn::Error {
    let written = key.unraw().to_string();
    let mut msg = format!(
        "unknown argument `{written}`; expected one of: {}",
        KEYS.join(", ")
    );
    let lower = written.to_lowercase();
    if lower != written && KEYS.contains(&lower.as_str()) {
        msg.push_str(&format!(" (keys are case-sensitive: write `{lower}`)"));
    }
    syn::Error::new(key.span(), msg)
}

/// Skips `= value` of an unknown key, up to the next top-level comma.
pub(super) fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tt, next)) = rest.token_tree() {
            if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ',') {
                return Ok(((), rest));
            }
            rest = next;
        }
        Ok(((), rest))
    })
}

pub(super) fn check_strategy(value: &Ident) -> syn::Result<()> {
    if STRATEGIES.iter().any(|s| value == s) {
        Ok(())
    } else {
        Err(syn::Error::new(
            value.span(),
            format!(
                "unknown strategy `{value}`; expected one of: {}",
                STRATEGIES.join(", ")
            ),
        ))
    }
}

/// A `partition = ...` expression; a string is refused: it would put every call in one
/// partition, and is surely meant as a parameter's name.
pub(super) fn check_partition(value: syn::Expr) -> syn::Result<syn::Expr> {
    let syn::Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Str(text),
        ..
    }) = &value
    else {
        return Ok(value);
    };
    let name = match syn::parse_str::<Ident>(&text.value()) {
        Ok(_) => text.value(),
        Err(_) => "tenant_id".to_string(),
    };
    Err(syn::Error::new(
        text.span(),
        format!(
            "`partition` is an expression over the call's parameters, computed at each call, \
             not a string (which would put every call in one partition): write e.g. \
             partition = {name} or partition = format!(\"tenant-{{{name}}}\")"
        ),
    ))
}

/// The longest executor name the tables hold (`VARCHAR(255)` on MySQL/MariaDB).
pub(super) const MAX_NAME_CHARS: usize = 255;

/// The longest queue name (the tables hold 255, and a queue is a name people type).
pub(super) const MAX_QUEUE_CHARS: usize = 100;

/// The longest remark: a line for people, not a document.
pub(super) const MAX_REMARK_CHARS: usize = 1000;

pub(super) fn parse_max_attempts(lit: &LitInt) -> syn::Result<u32> {
    const HINT: &str = "`max_attempts` must be a whole number from 1 to 2147483647; \
                        write e.g. max_attempts = 5";
    match lit.base10_parse::<u32>() {
        Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok(n),
        _ => Err(syn::Error::new(lit.span(), HINT)),
    }
}

pub(super) const TIMEOUT_FORMS: &str = "`timeout` must be a positive whole number of seconds or a \
                             string \"<n>ms\", \"<n>s\", \"<n>m\" or \"<n>h\", at most a \
                             year (8784h); write e.g. timeout = 30 or timeout = \"500ms\"";

pub(super) const DEADLINE_FORMS: &str =
    "`deadline` must be a positive whole number of seconds or a \
                              string \"<n>ms\", \"<n>s\", \"<n>m\" or \"<n>h\", at most a \
                              year (8784h); write e.g. deadline = 600 or deadline = \"10m\"";

/// The longest timeout, in milliseconds: a year (366 days), as the runtime's settings.
pub(super) const MAX_TIMEOUT_MS: u64 = 366 * 24 * 3_600_000;

pub(super) fn parse_timeout_int(lit: &LitInt) -> syn::Result<u64> {
    lit.base10_parse::<u64>()
        .ok()
        .and_then(|secs| secs.checked_mul(1000))
        .filter(|&ms| ms > 0 && ms <= MAX_TIMEOUT_MS)
        .ok_or_else(|| syn::Error::new(lit.span(), TIMEOUT_FORMS))
}

pub(super) fn parse_timeout_str(lit: &LitStr) -> syn::Result<u64> {
    timeout_millis(&lit.value()).ok_or_else(|| syn::Error::new(lit.span(), TIMEOUT_FORMS))
}

pub(super) const EVERY_FORMS: &str = "`every` must be a period of one second to a year: \"30s\", \
     \"5m\", \"2h\" or \"1d\" (for times of day, use `cron = \"0 0 6 * * *\"`)";

/// `"30s"`, `"5m"`, `"2h"`, `"1d"` → milliseconds, one second to a year; `None` else.
pub(super) fn every_millis(text: &str) -> Option<u64> {
    let ms = match text.strip_suffix('d') {
        Some(days) if !days.is_empty() && days.bytes().all(|b| b.is_ascii_digit()) => {
            days.parse::<u64>().ok()?.checked_mul(24 * 3_600_000)?
        }
        _ => timeout_millis(text)?,
    };
    (1_000..=MAX_TIMEOUT_MS).contains(&ms).then_some(ms)
}

/// `"500ms"`, `"30s"`, `"5m"`, `"2h"` → milliseconds; `None` for 0, overflow or
/// anything else.
pub(super) fn timeout_millis(text: &str) -> Option<u64> {
    let (digits, factor) = if let Some(d) = text.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = text.strip_suffix('s') {
        (d, 1_000)
    } else if let Some(d) = text.strip_suffix('m') {
        (d, 60_000)
    } else if let Some(d) = text.strip_suffix('h') {
        (d, 3_600_000)
    } else {
        return None;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse::<u64>()
        .ok()?
        .checked_mul(factor)
        .filter(|&ms| ms > 0 && ms <= MAX_TIMEOUT_MS)
}
