//! The arguments that say how a call merges with earlier ones: `unique_for = ".."`,
//! `debounce = ".."` and `debounce_edge = ".."`; parsed, then checked against the
//! strategy and the queue.

use proc_macro2::Span;
use syn::parse::ParseStream;
use syn::{Ident, LitInt, LitStr, Token};

use super::values::{parse_timeout_int, parse_timeout_str};
use super::{kw, set_once, Errors, QUEUED_STRATEGIES};

/// The slots of `unique_for`, `debounce` and `debounce_edge` while parsing.
#[derive(Default)]
pub(super) struct ModeSlots {
    pub(super) unique_for_ms: Option<Option<(u64, Span)>>,
    pub(super) debounce_ms: Option<Option<(u64, Span)>>,
    pub(super) debounce_leading: Option<Option<(bool, Span)>>,
}

/// What `unique_for = ..` or `debounce = ..` accepts.
fn period_forms(name: &str) -> &'static str {
    if name == "unique_for" {
        "`unique_for` must be a positive whole number of seconds or a string \"<n>ms\", \
         \"<n>s\", \"<n>m\" or \"<n>h\", at most a year (8784h); write e.g. \
         unique_for = \"1h\""
    } else {
        "`debounce` must be a positive whole number of seconds or a string \"<n>ms\", \
         \"<n>s\", \"<n>m\" or \"<n>h\", at most a year (8784h); write e.g. \
         debounce = \"5s\""
    }
}

/// Checks `unique_for`, `debounce` and `debounce_edge` against the strategy and queue.
pub(super) fn check_modes(
    errors: &mut Errors,
    strategy: Option<&Ident>,
    queue: &Option<Option<LitStr>>,
    modes: &ModeSlots,
) {
    let stored = strategy.map_or(true, |s| QUEUED_STRATEGIES.iter().any(|q| s == q));
    for (name, slot) in [
        ("unique_for", &modes.unique_for_ms),
        ("debounce", &modes.debounce_ms),
    ] {
        if let (false, Some(Some((_, span)))) = (stored, slot) {
            errors.push(syn::Error::new(
                *span,
                format!(
                    "`{name}` merges a call with an earlier call's stored request: `{}` \
                     stores none to merge with; use type = SaveAsync",
                    strategy.map(ToString::to_string).unwrap_or_default()
                ),
            ));
        }
    }
    if let (Some(Some((_, span))), Some(Some(_))) = (&modes.unique_for_ms, &modes.debounce_ms) {
        errors.push(syn::Error::new(
            *span,
            "`unique_for` and `debounce` both say what a later call gets: give one",
        ));
    }
    let leading = matches!(modes.debounce_leading, Some(Some((true, _))));
    match (&modes.debounce_ms, &modes.debounce_leading) {
        (None | Some(None), Some(Some((_, span)))) => errors.push(syn::Error::new(
            *span,
            "`debounce_edge` says which call of a debounce window runs: give it with \
             `debounce = \"5s\"`",
        )),
        (Some(Some((_, span))), _) if !leading && matches!(queue, None | Some(None)) => errors
            .push(syn::Error::new(
                *span,
                "a trailing `debounce` keeps one waiting request per partition and pushes its \
                 start to the window's end, which only a queue's claim waits for: name the \
                 queue, e.g. #[async_exec(type = SaveAsync, queue = \"reindex\", \
                 partition = account, debounce = \"5s\")], or give debounce_edge = \"leading\"",
            )),
        _ => {}
    }
}

/// Parses one of `unique_for = ..`, `debounce = ..`, `debounce_edge = ".."`.
pub(super) fn parse_one(
    input: ParseStream<'_>,
    errors: &mut Errors,
    slots: &mut ModeSlots,
) -> syn::Result<()> {
    if input.peek(kw::unique_for) || input.peek(kw::debounce) {
        let (name, key_span, slot) = if input.peek(kw::unique_for) {
            let key: kw::unique_for = input.parse()?;
            ("unique_for", key.span, &mut slots.unique_for_ms)
        } else {
            let key: kw::debounce = input.parse()?;
            ("debounce", key.span, &mut slots.debounce_ms)
        };
        input.parse::<Token![=]>()?;
        let span = input.span();
        let forms = period_forms(name);
        let value = if input.peek(LitStr) {
            parse_timeout_str(&input.parse()?)
        } else if input.peek(LitInt) {
            parse_timeout_int(&input.parse()?)
        } else {
            return Err(input.error(forms));
        };
        let value = match value {
            Ok(ms) => Some((ms, span)),
            Err(e) => {
                errors.push(syn::Error::new(e.span(), forms));
                None
            }
        };
        set_once(errors, slot, name, key_span, value);
    } else {
        let key: kw::debounce_edge = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: LitStr = input.parse()?;
        let value = match value.value().as_str() {
            "leading" => Some((true, value.span())),
            "trailing" => Some((false, value.span())),
            _ => {
                errors.push(syn::Error::new(
                    value.span(),
                    "`debounce_edge` is \"trailing\" (the default: the waiting request takes \
                     the newest call's arguments and runs at the window's end) or \"leading\" \
                     (the first call runs at once, the later ones of the window get it)",
                ));
                None
            }
        };
        set_once(
            errors,
            &mut slots.debounce_leading,
            "debounce_edge",
            key.span,
            value,
        );
    }
    Ok(())
}
