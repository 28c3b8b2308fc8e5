//! The pieces of generated code that an executor `fn` (`expand/`) and a service's method
//! (`service.rs`) share: the wrapper's parameters, the args struct's fields and derive,
//! the run body, the `ExecutorDef`'s fields, the sign of the persisted parameters, the
//! facade's default path, the error appended to an item, and the checks of the
//! attribute's arguments against the parameters.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::ReturnType;

use crate::attr::{self, Args};
use crate::validate::{Kind, Param};

/// What the parameters make of the attribute's arguments: a schedule with stored
/// parameters, a `partition` naming what the call does not have. Every error, combined.
pub(crate) fn args_error(args: &Args, params: &[Param]) -> Option<syn::Error> {
    [
        crate::validate::schedule_error(args, params),
        crate::partition::check(args.partition.as_ref(), params),
    ]
    .into_iter()
    .flatten()
    .reduce(|mut all, more| {
        all.combine(more);
        all
    })
}

/// Appends the error to `tokens` (tokio's `token_stream_with_error`).
pub(crate) fn with_error(mut tokens: TokenStream, error: syn::Error) -> TokenStream {
    tokens.extend(error.into_compile_error());
    tokens
}

/// The facade's path when the attribute gives no `crate = "..."`.
pub(crate) fn default_crate_path() -> syn::Path {
    syn::parse_quote!(::async_exec)
}

/// The FNV-1a 64-bit hash of `bytes`.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A type as one whitespace-free string: `Vec < String >` → `Vec<String>`.
fn type_string(ty: &syn::Type) -> String {
    ty.to_token_stream()
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// `(sign, signature)` of the persisted parameters: the 16-hex-digit FNV-1a hash
/// of `name:Type,name:Type`, and `(name: Type, name: Type)`.
pub(crate) fn sign_and_signature(params: &[Param]) -> (String, String) {
    let persisted: Vec<(String, String)> = params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Persisted))
        .map(|p| (p.ident.unraw().to_string(), type_string(&p.ty)))
        .collect();
    let normalized: Vec<String> = persisted.iter().map(|(n, t)| format!("{n}:{t}")).collect();
    let readable: Vec<String> = persisted.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    (
        format!("{:016x}", fnv1a64(normalized.join(",").as_bytes())),
        format!("({})", readable.join(", ")),
    )
}

/// The wrapper's persisted parameters: `user_id: i64, email: String` (no `mut`,
/// no parameter attributes).
pub(crate) fn wrapper_params(params: &[Param]) -> Vec<TokenStream> {
    params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Persisted))
        .map(|p| {
            let (ident, ty) = (&p.ident, &p.ty);
            quote!(#ident: #ty)
        })
        .collect()
}

/// The persisted parameters as the args struct's fields: the parameters' names, and the
/// fields named like them (the JSON keys) but spanned at the parameter's type, so that
/// serde's errors for a type without `Serialize`/`Deserialize` point at that type.
pub(crate) struct Fields<'a> {
    pub(crate) persisted: Vec<&'a syn::Ident>,
    pub(crate) fields: Vec<syn::Ident>,
    pub(crate) types: Vec<&'a syn::Type>,
}

impl<'a> Fields<'a> {
    pub(crate) fn of(params: &'a [Param]) -> Fields<'a> {
        let stored = || params.iter().filter(|p| matches!(p.kind, Kind::Persisted));
        Fields {
            persisted: stored().map(|p| &p.ident).collect(),
            fields: stored()
                .map(|p| {
                    let span = syn::spanned::Spanned::span(&p.ty);
                    let name = p.ident.to_string();
                    match name.strip_prefix("r#") {
                        Some(raw) => syn::Ident::new_raw(raw, span),
                        None => syn::Ident::new(&name, span),
                    }
                })
                .collect(),
            types: stored().map(|p| &p.ty).collect(),
        }
    }
}

/// The body's arguments, in order: the decoded fields, the injected values.
pub(crate) fn call_args(
    params: &[Param],
    fields: &[syn::Ident],
    decoded: &syn::Ident,
    inv: &syn::Ident,
) -> Vec<TokenStream> {
    let mut field_iter = fields.iter();
    params
        .iter()
        .map(|p| match &p.kind {
            Kind::Persisted => {
                let field = field_iter
                    .next()
                    .expect("one field per persisted parameter");
                quote!(#decoded.#field)
            }
            Kind::Data(inner) => quote!(#inv.data::<#inner>()?),
            Kind::Context => quote!(#inv.context()),
        })
        .collect()
}

/// Where a return type without `IntoOutcome` is reported: at the return type.
pub(crate) fn return_span(output: &ReturnType, fn_name: &syn::Ident) -> Span {
    let at = match output {
        ReturnType::Default => fn_name.span(),
        ReturnType::Type(_, ty) => syn::spanned::Spanned::span(ty),
    };
    Span::call_site().located_at(at)
}

/// Where a body whose future is not `Send` is reported: at the `async` keyword.
pub(crate) fn async_span(sig: &syn::Signature) -> Span {
    match &sig.asyncness {
        Some(token) => Span::call_site().located_at(token.span),
        None => Span::call_site(),
    }
}

/// The args struct's derive, spanned at the parameter list: serde's own errors (a
/// persisted type without `Serialize`) point there rather than at the attribute.
pub(crate) fn args_derive(c: &syn::Path, sig: &syn::Signature) -> TokenStream {
    let params_span = Span::call_site().located_at(sig.paren_token.span.join());
    respan(
        quote!(#[derive(#c::__private::serde::Serialize, #c::__private::serde::Deserialize)]),
        params_span,
    )
}

/// Runs the body (`call`, a future) and turns its value into the outcome; the value is
/// kept (its JSON) when it serializes and the record keeps it.
pub(crate) fn run_body(
    c: &syn::Path,
    inv: &syn::Ident,
    ret_span: Span,
    call: TokenStream,
) -> TokenStream {
    let c_at_ret = respan(c.to_token_stream(), ret_span);
    quote_spanned! {ret_span=>
        {
            let __async_exec_slot = #inv.__result_slot();
            let __async_exec_out = #call.await;
            if let ::core::option::Option::Some(__async_exec_slot) = __async_exec_slot {
                #[allow(unused_imports)]
                use #c_at_ret::__private::{KeepJson as _, NoJson as _};
                // The two `&` choose between the traits (autoref specialization).
                #[allow(clippy::needless_borrow)]
                let __async_exec_json =
                    (&&#c_at_ret::__private::ResultOf(&__async_exec_out)).__result_json();
                __async_exec_slot.keep(__async_exec_json);
            }
            #c_at_ret::__private::IntoOutcome::into_outcome(__async_exec_out)
        }
    }
}

/// The fields of the `ExecutorDef` between `path` and `run`, from the attribute's
/// arguments and the parameters; `more_data`: values needed besides the `Data<T>`
/// parameters (a service's instance).
pub(crate) fn def_fields(
    args: &Args,
    c: &syn::Path,
    params: &[Param],
    more_data: &[TokenStream],
) -> TokenStream {
    let (sign, signature) = sign_and_signature(params);
    let remark = match &args.remark {
        Some(lit) => lit.to_token_stream(),
        None => quote!(""),
    };
    let strategy = &args.strategy;
    let some_or_none = |value: Option<TokenStream>| match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    };
    let max_attempts = some_or_none(args.max_attempts.map(|n| quote!(#n)));
    let timeout_ms = some_or_none(args.timeout_ms.map(|ms| quote!(#ms)));
    let queue = some_or_none(args.queue.as_ref().map(|lit| quote!(#lit)));
    let deadline_ms = some_or_none(args.deadline_ms.map(|(ms, _)| quote!(#ms)));
    let catch_up = args.catch_up;
    let unique_for_ms = some_or_none(args.unique_for_ms.map(|(ms, _)| quote!(#ms)));
    let debounce_ms = some_or_none(args.debounce_ms.map(|(ms, _)| quote!(#ms)));
    let debounce_leading = args.debounce_leading.is_some_and(|(leading, _)| leading);
    let schedule = some_or_none(args.schedule.as_ref().map(|schedule| match schedule {
        attr::ScheduleArg::Every(ms, _) => {
            quote!(#c::__private::Schedule::Every { ms: #ms, catch_up: #catch_up })
        }
        attr::ScheduleArg::Cron(lit) => {
            let time_zone = some_or_none(args.time_zone.as_ref().map(|zone| quote!(#zone)));
            quote!(#c::__private::Schedule::Cron {
                expression: #lit,
                time_zone: #time_zone,
                catch_up: #catch_up,
            })
        }
    }));
    let data_needs = more_data
        .iter()
        .cloned()
        .chain(params.iter().filter_map(|p| match &p.kind {
            Kind::Data(inner) => Some(quote!(#c::__private::DataNeed::of::<#inner>())),
            _ => None,
        }));
    let secrets = params
        .iter()
        .filter(|p| p.secret)
        .map(|p| p.ident.unraw().to_string());
    quote! {
        sign: #sign,
        signature: #signature,
        remark: #remark,
        strategy: #c::Strategy::#strategy,
        max_attempts: #max_attempts,
        timeout_ms: #timeout_ms,
        queue: #queue,
        deadline_ms: #deadline_ms,
        data: &[#(#data_needs),*],
        secrets: &[#(#secrets),*],
        schedule: #schedule,
        modes: #c::__private::Modes {
            unique_for_ms: #unique_for_ms,
            debounce_ms: #debounce_ms,
            debounce_leading: #debounce_leading,
        },
    }
}

/// `tokens` with every span (recursively) set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(group) = &tt {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tt = TokenTree::Group(inner);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
