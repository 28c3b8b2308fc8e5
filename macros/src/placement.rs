//! Where the attributes of the annotated function go: on the wrapper that callers call,
//! on the hidden executor body that the runtime runs, or on both.
//!
//! - `#[tracing::instrument]` (any path ending in `instrument`) goes on the body, so that
//!   its span is entered when the body runs, not when the call is made. Without a
//!   `name = ...` of its own it gets the function's name (the body's own is hidden).
//! - Lint levels: `allow` on both (it silences the same lint wherever it fires);
//!   `warn`, `deny`, `forbid` and `expect` on the body, the code the user wrote.
//! - `cfg` on both; everything else (docs, `deprecated`, `must_use`, `inline`,
//!   `cfg_attr`, ...) on the wrapper, as before.

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use syn::{Attribute, Meta};

/// Where one attribute goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Wrapper,
    Body,
    Both,
}

fn place(attr: &Attribute) -> Place {
    let path = attr.path();
    let single = path.segments.len() == 1;
    let Some(last) = path.segments.last() else {
        return Place::Wrapper;
    };
    match last.ident.to_string().as_str() {
        "instrument" => Place::Body,
        "allow" | "cfg" if single => Place::Both,
        "warn" | "deny" | "forbid" | "expect" if single => Place::Body,
        _ => Place::Wrapper,
    }
}

/// The attributes of the wrapper and those of the body, in their original order; an
/// `instrument` without a name is named after `fn_name`.
pub(crate) fn split(attrs: &[Attribute], fn_name: &str) -> (Vec<TokenStream>, Vec<TokenStream>) {
    let mut wrapper = Vec::new();
    let mut body = Vec::new();
    for attr in attrs {
        match place(attr) {
            Place::Wrapper => wrapper.push(quote!(#attr)),
            Place::Both => {
                wrapper.push(quote!(#attr));
                body.push(quote!(#attr));
            }
            Place::Body if is_instrument(attr) => body.push(named_instrument(attr, fn_name)),
            Place::Body => body.push(quote!(#attr)),
        }
    }
    (wrapper, body)
}

fn is_instrument(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "instrument")
}

/// `#[instrument(..)]` with `name = "fn_name"` added unless it has a `name` already.
fn named_instrument(attr: &Attribute, fn_name: &str) -> TokenStream {
    let pound = &attr.pound_token;
    let path = attr.path();
    match &attr.meta {
        Meta::Path(_) => quote!(#pound[#path(name = #fn_name)]),
        Meta::List(list) if !names_itself(&list.tokens) => {
            let tokens = &list.tokens;
            if tokens.is_empty() {
                quote!(#pound[#path(name = #fn_name)])
            } else {
                quote!(#pound[#path(name = #fn_name, #tokens)])
            }
        }
        _ => quote!(#attr),
    }
}

/// Whether the arguments hold a top-level `name = ...`.
fn names_itself(tokens: &TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.clone().into_iter().collect();
    tokens.windows(2).any(|pair| {
        matches!(&pair[0], TokenTree::Ident(i) if i == "name")
            && matches!(&pair[1], TokenTree::Punct(p) if p.as_char() == '=')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_of(item: syn::ItemFn) -> (Vec<String>, Vec<String>) {
        let (wrapper, body) = split(&item.attrs, "f");
        let strings = |v: Vec<TokenStream>| v.into_iter().map(|t| t.to_string()).collect();
        (strings(wrapper), strings(body))
    }

    #[test]
    fn instrument_and_lints_go_on_the_body_docs_on_the_wrapper() {
        let (wrapper, body) = split_of(syn::parse_quote! {
            /// docs
            #[tracing::instrument(skip(mailer), fields(user = user_id))]
            #[allow(clippy::too_many_arguments)]
            #[deny(unused_variables)]
            #[cfg(feature = "mail")]
            #[deprecated]
            async fn f() {}
        });
        assert_eq!(
            wrapper,
            [
                "# [doc = r\" docs\"]",
                "# [allow (clippy :: too_many_arguments)]",
                "# [cfg (feature = \"mail\")]",
                "# [deprecated]",
            ]
        );
        assert_eq!(
            body,
            [
                "# [tracing :: instrument (name = \"f\" , skip (mailer) , fields (user = user_id))]",
                "# [allow (clippy :: too_many_arguments)]",
                "# [deny (unused_variables)]",
                "# [cfg (feature = \"mail\")]",
            ]
        );
    }

    #[test]
    fn instrument_keeps_its_own_name() {
        let (_, body) = split_of(syn::parse_quote! {
            #[instrument(level = "debug", name = "mail.send")]
            #[instrument]
            #[instrument()]
            async fn f() {}
        });
        assert_eq!(
            body,
            [
                "# [instrument (level = \"debug\" , name = \"mail.send\")]",
                "# [instrument (name = \"f\")]",
                "# [instrument (name = \"f\")]",
            ]
        );
    }
}
