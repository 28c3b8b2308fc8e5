//! Code generation for `#[async_exec]`.
//!
//! The annotated `async fn` becomes a plain `fn` of the same name, visibility,
//! attributes and persisted parameters that returns a `Call`. Inside it live the
//! serde args struct, the original body (as a nested `async fn`, unchanged), a
//! type-erased run function and the registered `ExecutorDef`.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::{ItemFn, ReturnType};

use crate::attr::{self, Args};
use crate::validate::{self, Kind, Param};

/// The whole attribute: parse, validate, expand. Never panics on user input:
/// errors come back as `compile_error!`s next to the item.
pub(crate) fn async_exec(args: TokenStream, item: TokenStream) -> TokenStream {
    if let Ok(item_impl) = syn::parse2::<syn::ItemImpl>(item.clone()) {
        return crate::service::service(args, item_impl);
    }
    let item_fn = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(item_fn) => item_fn,
        Err(e) => {
            let e = syn::Error::new(
                e.span(),
                format!(
                    "{e}; #[async_exec] goes on an `async fn` with a body (or on the `impl` \
                     block of a service)"
                ),
            );
            return with_error(item, e);
        }
    };
    let args_tokens = args.clone();
    let args = syn::parse2::<Args>(args);
    let params = validate::check(&item_fn);
    match (args, params) {
        (Ok(args), Ok(params)) => match schedule_error(&args, &params) {
            None => expand(&args, &item_fn, &params),
            Some(e) => {
                let c = args.crate_path.clone().unwrap_or_else(default_crate_path);
                with_error(stub(&c, &item_fn, &params), e)
            }
        },
        // The signature is fine: emit a stub with the wrapper's signature, so that
        // callers type-check against the `Call` they will get once the attribute
        // is fixed, and body errors still show.
        (Err(e), Ok(params)) => {
            let c = attr::find_crate_path(&args_tokens).unwrap_or_else(default_crate_path);
            let stub = stub(&c, &item_fn, &params);
            with_error(stub, e)
        }
        (args, Err(mut e)) => {
            if let Err(args_error) = args {
                let mut all = args_error;
                all.combine(e);
                e = all;
            }
            // The item as written, but without `#[secret]` (unknown to rustc).
            let mut item_fn = item_fn;
            item_fn.sig.inputs = validate::strip_secrets(&item_fn.sig.inputs);
            with_error(item_fn.into_token_stream(), e)
        }
    }
}

/// Appends the error to `tokens` (tokio's `token_stream_with_error`).
pub(crate) fn with_error(mut tokens: TokenStream, error: syn::Error) -> TokenStream {
    tokens.extend(error.into_compile_error());
    tokens
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

pub(crate) fn default_crate_path() -> syn::Path {
    syn::parse_quote!(::async_exec)
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

fn expand(args: &Args, item: &ItemFn, params: &[Param]) -> TokenStream {
    let c = args.crate_path.clone().unwrap_or_else(default_crate_path);
    let serde_crate = format!(
        "{}::__private::serde",
        c.to_token_stream().to_string().replace(' ', "")
    );

    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let fn_name = &sig.ident;
    let fn_token = &sig.fn_token;
    let inputs = validate::strip_secrets(&sig.inputs);
    let output = &sig.output;
    let (attrs, body_attrs) = crate::placement::split(attrs, &fn_name.unraw().to_string());

    let def_site = Span::mixed_site();
    let args_struct = format_ident!("__AsyncExecArgs", span = def_site);
    let body_fn = format_ident!("__async_exec_body", span = def_site);
    let run_fn = format_ident!("__async_exec_run", span = def_site);
    let def_static = format_ident!("__ASYNC_EXEC_DEF", span = def_site);
    let inv = format_ident!("__inv", span = def_site);
    let decoded = format_ident!("__args", span = def_site);

    let wrapper_params = wrapper_params(params);
    let Fields {
        persisted,
        fields,
        types: field_types,
    } = Fields::of(params);
    let call_args = call_args(params, &fields, &decoded, &inv);
    let ret_span = return_span(output, fn_name);
    let body_fn_at_ret = format_ident!("__async_exec_body", span = def_site.located_at(ret_span));
    let run_body = run_body(
        &c,
        &inv,
        ret_span,
        quote_spanned! {ret_span=>
            #body_fn_at_ret(#(#call_args),*)
        },
    );
    let async_span = async_span(sig);
    let boxed_body = quote_spanned! {async_span=>
        ::std::boxed::Box::pin(async move {
            let #decoded: #args_struct = #inv.decode()?;
            #run_body
        })
    };
    let derive = args_derive(&c, sig);

    let path = {
        let fn_name = fn_name.unraw().to_string();
        quote!(::core::concat!(::core::module_path!(), "::", #fn_name))
    };
    let name = match &args.name {
        Some(lit) => lit.to_token_stream(),
        None => path.clone(),
    };
    let def_fields = def_fields(args, &c, params, &[]);

    quote! {
        #(#attrs)*
        #vis #fn_token #fn_name(#(#wrapper_params),*) -> #c::Call {
            #derive
            #[serde(crate = #serde_crate)]
            struct #args_struct { #(#fields: #field_types),* }

            #(#body_attrs)*
            async fn #body_fn(#inputs) #output #block

            fn #run_fn(#inv: #c::__private::Invocation)
                -> #c::__private::BoxFuture<'static, ::core::result::Result<(), #c::__private::Failure>>
            {
                #boxed_body
            }

            static #def_static: #c::__private::ExecutorDef = #c::__private::ExecutorDef {
                name: #name,
                path: #path,
                #def_fields
                run: #run_fn,
            };
            #c::__private::inventory::submit! { #c::__private::Registration(&#def_static) }

            #c::Call::__new(&#def_static, &#args_struct { #(#fields: #persisted),* })
        }
    }
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
    }
}

/// A schedule on an executor with stored parameters: its ticks would have no arguments
/// to give it.
pub(crate) fn schedule_error(args: &Args, params: &[Param]) -> Option<syn::Error> {
    let schedule = args.schedule.as_ref()?;
    params
        .iter()
        .any(|p| matches!(p.kind, Kind::Persisted))
        .then(|| {
            syn::Error::new(
                schedule.span(),
                "a scheduled executor is called by its schedule, with no arguments: its \
                 parameters may only be `Data<T>` and `Context` (`Context::tick` gives the \
                 time it was scheduled at)",
            )
        })
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

/// What stands in for the function when only the attribute's arguments are
/// wrong: the wrapper's signature, the original body kept (so its errors still
/// show), no registration.
fn stub(c: &syn::Path, item: &ItemFn, params: &[Param]) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let (fn_name, fn_token, output) = (&sig.ident, &sig.fn_token, &sig.output);
    let inputs = validate::strip_secrets(&sig.inputs);
    let body_fn = format_ident!("__async_exec_body", span = Span::mixed_site());
    let wrapper_params = wrapper_params(params);
    let persisted = params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Persisted))
        .map(|p| &p.ident);
    quote! {
        #(#attrs)*
        #vis #fn_token #fn_name(#(#wrapper_params),*) -> #c::Call {
            #[allow(dead_code)]
            async fn #body_fn(#inputs) #output #block
            let _ = (#(#persisted,)*);
            ::core::unreachable!("#[async_exec] has invalid arguments")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> String {
        async_exec(args, item).to_string()
    }

    #[test]
    fn fnv1a64_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn sign_of_persisted_params_only() {
        let item: ItemFn = syn::parse_quote! {
            async fn f(user_id: i64, mailer: Data<Mailer>, email: String, tags: Vec < String >, ctx: Context) {}
        };
        let params = validate::check(&item).unwrap();
        let (sign, signature) = sign_and_signature(&params);
        assert_eq!(
            sign,
            format!(
                "{:016x}",
                fnv1a64(b"user_id:i64,email:String,tags:Vec<String>")
            )
        );
        assert_eq!(
            signature,
            "(user_id: i64, email: String, tags: Vec<String>)"
        );

        let none: ItemFn = syn::parse_quote! { async fn g(ctx: Context) {} };
        let (sign, signature) = sign_and_signature(&validate::check(&none).unwrap());
        assert_eq!(sign, "cbf29ce484222325");
        assert_eq!(signature, "()");
    }

    #[test]
    fn expands_the_documented_example() {
        let actual = expand_str(
            quote!(type = SaveAsync, remark = "send mail"),
            quote! {
                /// docs
                pub async fn send_welcome(mut user_id: i64, email: String, mailer: Data<Mailer>, ctx: Context) -> anyhow::Result<()> {
                    user_id += 1;
                    mailer.send(user_id, &email, ctx).await
                }
            },
        );
        let sign = format!("{:016x}", fnv1a64(b"user_id:i64,email:String"));
        let expected = quote! {
            #[doc = r" docs"]
            pub fn send_welcome(user_id: i64, email: String) -> ::async_exec::Call {
                #[derive(::async_exec::__private::serde::Serialize, ::async_exec::__private::serde::Deserialize)]
                #[serde(crate = "::async_exec::__private::serde")]
                struct __AsyncExecArgs { user_id: i64, email: String }

                async fn __async_exec_body(mut user_id: i64, email: String, mailer: Data<Mailer>, ctx: Context) -> anyhow::Result<()> {
                    user_id += 1;
                    mailer.send(user_id, &email, ctx).await
                }

                fn __async_exec_run(__inv: ::async_exec::__private::Invocation)
                    -> ::async_exec::__private::BoxFuture<'static, ::core::result::Result<(), ::async_exec::__private::Failure>>
                {
                    ::std::boxed::Box::pin(async move {
                        let __args: __AsyncExecArgs = __inv.decode()?;
                        {
                            let __async_exec_slot = __inv.__result_slot();
                            let __async_exec_out = __async_exec_body(__args.user_id, __args.email, __inv.data::<Mailer>()?, __inv.context()).await;
                            if let ::core::option::Option::Some(__async_exec_slot) = __async_exec_slot {
                                #[allow(unused_imports)]
                                use ::async_exec::__private::{KeepJson as _, NoJson as _};
                                #[allow(clippy::needless_borrow)]
                                let __async_exec_json =
                                    (&&::async_exec::__private::ResultOf(&__async_exec_out)).__result_json();
                                __async_exec_slot.keep(__async_exec_json);
                            }
                            ::async_exec::__private::IntoOutcome::into_outcome(__async_exec_out)
                        }
                    })
                }

                static __ASYNC_EXEC_DEF: ::async_exec::__private::ExecutorDef = ::async_exec::__private::ExecutorDef {
                    name: ::core::concat!(::core::module_path!(), "::", "send_welcome"),
                    path: ::core::concat!(::core::module_path!(), "::", "send_welcome"),
                    sign: #sign,
                    signature: "(user_id: i64, email: String)",
                    remark: "send mail",
                    strategy: ::async_exec::Strategy::SaveAsync,
                    max_attempts: ::core::option::Option::None,
                    timeout_ms: ::core::option::Option::None,
                    queue: ::core::option::Option::None,
                    deadline_ms: ::core::option::Option::None,
                    data: &[::async_exec::__private::DataNeed::of::<Mailer>()],
                    secrets: &[],
                    schedule: ::core::option::Option::None,
                    run: __async_exec_run,
                };
                ::async_exec::__private::inventory::submit! { ::async_exec::__private::Registration(&__ASYNC_EXEC_DEF) }

                ::async_exec::Call::__new(&__ASYNC_EXEC_DEF, &__AsyncExecArgs { user_id: user_id, email: email })
            }
        };
        assert_eq!(actual, expected.to_string());
    }

    #[test]
    fn options_reach_the_def() {
        let actual = expand_str(
            quote!(type = Thread, name = "mail.x", max_attempts = 7, timeout = "1m", crate = "my::facade"),
            quote!(
                pub(crate) async fn x() {}
            ),
        );
        for needle in [
            "name : \"mail.x\"",
            "sign : \"cbf29ce484222325\"",
            "signature : \"()\"",
            "remark : \"\"",
            "strategy : my :: facade :: Strategy :: Thread",
            "max_attempts : :: core :: option :: Option :: Some (7u32)",
            "timeout_ms : :: core :: option :: Option :: Some (60000u64)",
            "# [serde (crate = \"my::facade::__private::serde\")]",
            "pub (crate) fn x () -> my :: facade :: Call",
            "struct __AsyncExecArgs { }",
            "__AsyncExecArgs { })",
            "# [derive (my :: facade :: __private :: serde :: Serialize , my :: facade :: __private :: serde :: Deserialize)]",
        ] {
            assert!(actual.contains(needle), "missing {needle:?} in\n{actual}");
        }
    }

    #[test]
    fn secret_parameters_reach_the_def_and_leave_the_body() {
        let actual = expand_str(
            quote!(type = SaveAsync),
            quote!(
                async fn charge(#[secret] card: String, #[secret] r#ref: String, amount: i64) {}
            ),
        );
        assert!(
            actual.contains("secrets : & [\"card\" , \"ref\"]"),
            "{actual}"
        );
        assert!(
            actual.contains(
                "async fn __async_exec_body (card : String , r#ref : String , amount : i64)"
            ),
            "{actual}"
        );
        assert!(!actual.contains("# [secret]"), "{actual}");
    }

    #[test]
    fn raw_identifiers() {
        let actual = expand_str(
            quote!(type = Async),
            quote!(
                async fn r#move(r#type: String) {}
            ),
        );
        assert!(
            actual.contains("struct __AsyncExecArgs { r#type : String }"),
            "{actual}"
        );
        assert!(actual.contains("\"(type: String)\""), "{actual}");
        assert!(actual.contains("\"::\" , \"move\""), "{actual}");
    }

    #[test]
    fn invalid_signature_keeps_the_original_item() {
        let actual = expand_str(
            quote!(type = Nope),
            quote!(
                fn f(a: &str) {}
            ),
        );
        assert!(actual.starts_with("fn f (a : & str) { }"), "{actual}");
        assert_eq!(actual.matches("compile_error").count(), 3, "{actual}");
    }

    #[test]
    fn invalid_args_emit_a_stub_with_the_wrapper_signature() {
        let actual = expand_str(
            quote!(type = Nope),
            quote!(
                pub async fn f(a: i64, d: Data<X>) -> anyhow::Result<()> {
                    Ok(())
                }
            ),
        );
        assert!(
            actual.starts_with("pub fn f (a : i64) -> :: async_exec :: Call {"),
            "{actual}"
        );
        assert!(actual.contains("async fn __async_exec_body (a : i64 , d : Data < X >) -> anyhow :: Result < () > { Ok (()) }"), "{actual}");
        assert_eq!(actual.matches("compile_error").count(), 1, "{actual}");
    }

    #[test]
    fn not_a_function() {
        let actual = expand_str(
            quote!(type = Async),
            quote!(
                struct S;
            ),
        );
        assert!(actual.starts_with("struct S ;"), "{actual}");
        assert!(
            actual.contains("#[async_exec] goes on an `async fn`"),
            "{actual}"
        );
    }
}
