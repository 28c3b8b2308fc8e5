//! `partition = <expr>`: what the expression may name, and the code that computes it in
//! the call.
//!
//! The expression is evaluated in the generated call function, over the call's stored
//! parameters, before they move into the args struct; its value (any `Display`) becomes
//! the request's partition through `Call::__partition`, which a `.partition(..)` on the
//! call replaces. It may not name what the call does not have (a `Data<T>` or `Context`
//! parameter, injected when the body runs; a service's `self`, the caller's instance and
//! not the one that runs it), nor a `#[secret]` parameter, whose value the partition
//! would store in plain text beside its sealed copy.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;

use crate::validate::{Kind, Param};

/// Every misuse of a parameter in `expr`, each at the name as written.
pub(crate) fn check(expr: Option<&syn::Expr>, params: &[Param]) -> Option<syn::Error> {
    let expr = expr?;
    let mut errors: Vec<syn::Error> = Vec::new();
    for (name, span) in names(expr.to_token_stream()) {
        let why = if name == "self" {
            Some(
                "`partition` is computed from the call's stored arguments: `self` is the \
                 caller's instance, not the one registered to run the request; pass what the \
                 partition needs as a parameter"
                    .to_string(),
            )
        } else {
            params
                .iter()
                .find(|p| p.ident.unraw() == name)
                .and_then(|p| match &p.kind {
                    Kind::Data(_) | Kind::Context => Some(format!(
                        "`{name}` is injected when the body runs (`Data<T>`, `Context`), it is \
                         not an argument of the call: `partition` is computed at the call, from \
                         its stored parameters"
                    )),
                    Kind::Persisted if p.secret => Some(format!(
                        "`{name}` is `#[secret]`: a partition is stored in plain text (the \
                         console and the claims read it); compute it from a parameter that is \
                         not secret"
                    )),
                    Kind::Persisted => None,
                })
        };
        if let Some(why) = why {
            errors.push(syn::Error::new(span, why));
        }
    }
    let mut errors = errors.into_iter();
    let mut first = errors.next()?;
    first.extend(errors);
    Some(first)
}

/// The identifiers that may name a local in `tokens`: not a field or method after `.`,
/// not a path segment after `::` or before `::`, not a field name before a single `:`;
/// and the names a format string captures (`"{tenant}"`), at the string.
fn names(tokens: TokenStream) -> Vec<(String, Span)> {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut found = Vec::new();
    for (i, tt) in tokens.iter().enumerate() {
        match tt {
            TokenTree::Group(group) => found.extend(names(group.stream())),
            TokenTree::Ident(ident) => {
                let punct = |at: Option<usize>| match at.and_then(|at| tokens.get(at)) {
                    Some(TokenTree::Punct(p)) => Some(p.as_char()),
                    _ => None,
                };
                let before = punct(i.checked_sub(1));
                let after = punct(Some(i + 1));
                let after_two = punct(Some(i + 2));
                let is_path_tail = before == Some(':') && punct(i.checked_sub(2)) == Some(':');
                let is_path_head = after == Some(':') && after_two == Some(':');
                let is_field_name = after == Some(':') && after_two != Some(':');
                let is_macro = after == Some('!');
                if before != Some('.')
                    && !is_path_tail
                    && !is_path_head
                    && !is_field_name
                    && !is_macro
                {
                    found.push((ident.unraw().to_string(), ident.span()));
                }
            }
            TokenTree::Literal(lit) => {
                if let Ok(text) = syn::parse2::<syn::LitStr>(lit.to_token_stream()) {
                    found.extend(
                        captures(&text.value())
                            .into_iter()
                            .map(|name| (name, lit.span())),
                    );
                }
            }
            TokenTree::Punct(_) => {}
        }
    }
    found
}

/// The names a format string captures: `"{a} {b:>4} {{c}} {0} {}"` → `a`, `b`.
fn captures(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(escaped) = rest.strip_prefix('{') {
            rest = escaped;
            continue;
        }
        let end = rest.find(['}', ':']).unwrap_or(rest.len());
        let name = rest[..end].trim();
        if syn::parse_str::<syn::Ident>(name).is_ok() {
            found.push(name.to_string());
        }
        rest = &rest[end..];
    }
    found
}

/// The statement that computes the partition (before the arguments move into the args
/// struct), and what follows `Call::__new(..)` to hand it on; nothing without one. A value
/// whose type is not `Display` is reported at the expression.
pub(crate) fn compute(expr: Option<&syn::Expr>) -> (TokenStream, TokenStream) {
    let Some(expr) = expr else {
        return (TokenStream::new(), TokenStream::new());
    };
    let at = Span::call_site().located_at(syn::spanned::Spanned::span(expr));
    let value = syn::Ident::new("__async_exec_partition", Span::mixed_site());
    let string = quote_spanned!(at=> ::std::string::ToString::to_string(&(#expr)));
    (
        quote!(let #value: ::std::string::String = #string;),
        quote!(.__partition(#value)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(item: syn::ItemFn) -> Vec<Param> {
        crate::validate::check(&item).unwrap()
    }

    fn errors(expr: syn::Expr, params: &[Param]) -> Vec<String> {
        check(Some(&expr), params)
            .map(|e| e.into_iter().map(|e| e.to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn captures_of_format_strings() {
        assert_eq!(captures("{a} {b:>4} {{c}} {0} {} { d }x{"), ["a", "b", "d"]);
        assert!(captures("no braces").is_empty());
    }

    #[test]
    fn stored_parameters_fields_paths_and_macros_are_fine() {
        let ps = params(syn::parse_quote! {
            async fn f(tenant: i64, order: Order, mailer: Data<Mailer>, ctx: Context) {}
        });
        for expr in [
            quote!(tenant),
            quote!(order.mailer),
            quote!(order.ctx()),
            quote!(format!("t-{tenant}-{}", order.region)),
            quote!(mailer::tenant_of(&order)),
            quote!(Key { ctx: tenant }),
            quote!(<Order as Tenant>::ctx(&order)),
        ] {
            let expr: syn::Expr = syn::parse2(expr.clone()).unwrap();
            assert_eq!(errors(expr.clone(), &ps), Vec::<String>::new(), "{expr:?}");
        }
    }

    #[test]
    fn injected_secret_and_self_are_refused_each_at_its_name() {
        let ps = params(syn::parse_quote! {
            async fn f(tenant: i64, #[secret] card: String, mailer: Data<Mailer>, ctx: Context) {}
        });
        let errs = errors(
            syn::parse_quote!(format!("{}-{}-{card}", mailer.region, ctx.attempt())),
            &ps,
        );
        assert_eq!(errs.len(), 3, "{errs:?}");
        // The format string first (the captures of its literal), then the arguments.
        assert!(errs[0].starts_with("`card` is `#[secret]`"), "{errs:?}");
        assert!(errs[1].starts_with("`mailer` is injected when the body runs"));
        assert!(errs[2].starts_with("`ctx` is injected when the body runs"));
        let errs = errors(syn::parse_quote!(self.tenant_of(tenant)), &ps);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("`self` is the caller's instance"));
        assert!(errors(syn::parse_quote!(r#card.len()), &ps)[0].contains("`card` is `#[secret]`"));
    }

    #[test]
    fn computes_before_the_call_and_hands_it_on() {
        let expr: syn::Expr = syn::parse_quote!(tenant_id);
        let (stmt, call) = compute(Some(&expr));
        assert_eq!(
            stmt.to_string(),
            quote!(let __async_exec_partition: ::std::string::String =
                ::std::string::ToString::to_string(&(tenant_id));)
            .to_string()
        );
        assert_eq!(
            call.to_string(),
            quote!(.__partition(__async_exec_partition)).to_string()
        );
        let (stmt, call) = compute(None);
        assert!(stmt.is_empty() && call.is_empty());
    }
}
