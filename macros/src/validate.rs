//! Checks that the annotated item is a function `#[async_exec]` can turn into an
//! executor, and classifies its parameters.
//!
//! Every problem found is reported, each at the offending token and saying what
//! to write instead.

use syn::{FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, Signature, Type};

use crate::attr::Args;

/// How a parameter reaches the body when the executor runs.
#[derive(Debug)]
pub(crate) enum Kind {
    /// Stored in the request record (serde); a parameter of the returned call.
    Persisted,
    /// `Data<T>`: injected from the values registered on the runtime.
    Data(Box<Type>),
    /// `Context`: injected from the running request.
    Context,
}

/// One parameter of the annotated function.
#[derive(Debug)]
pub(crate) struct Param {
    /// The parameter's name, with the user's span (`mut` dropped).
    pub(crate) ident: Ident,
    /// The parameter's type, as written.
    pub(crate) ty: Type,
    /// How it is passed.
    pub(crate) kind: Kind,
    /// Marked `#[secret]`: sealed (encrypted) in the record.
    pub(crate) secret: bool,
}

/// Checks `item` and returns its parameters, or every error found.
pub(crate) fn check(item: &ItemFn) -> syn::Result<Vec<Param>> {
    let mut errors: Vec<syn::Error> = Vec::new();
    check_signature(&item.sig, &mut errors);

    let mut params = Vec::new();
    for input in &item.sig.inputs {
        match input {
            FnArg::Receiver(receiver) => errors.push(syn::Error::new_spanned(
                receiver,
                "a method of a service needs #[async_exec] on its `impl` block too \
                 (`#[async_exec] impl Mailer { .. }`), and the instance registered with \
                 `Builder::service`",
            )),
            FnArg::Typed(pat_type) => {
                check_type(&pat_type.ty, &mut errors);
                let kind = classify(&pat_type.ty);
                let secret = secret_attr(&pat_type.attrs, &kind, &mut errors);
                match plain_ident(&pat_type.pat) {
                    Some(ident) => params.push(Param {
                        ident,
                        ty: (*pat_type.ty).clone(),
                        kind,
                        secret,
                    }),
                    None => errors.push(syn::Error::new_spanned(
                        &pat_type.pat,
                        "parameters are stored by name, so this pattern is not supported: \
                         use a plain identifier (e.g. `point: (i64, i64)`) and destructure \
                         it in the body",
                    )),
                }
            }
        }
    }

    let mut errors = errors.into_iter();
    match errors.next() {
        None => Ok(params),
        Some(mut first) => {
            first.extend(errors);
            Err(first)
        }
    }
}

fn check_signature(sig: &Signature, errors: &mut Vec<syn::Error>) {
    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new_spanned(
            constness,
            "`const fn` is not supported: remove `const`",
        ));
    }
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            "the `async` keyword is missing: #[async_exec] goes on an `async fn`",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(
            unsafety,
            "`unsafe fn` is not supported: remove `unsafe` and use an `unsafe` block in the body",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "`extern` functions are not supported: remove the ABI",
        ));
    }
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "generic parameters are not supported: an executor is registered once, \
             so use concrete types",
        ));
    }
    if let Some(where_clause) = &sig.generics.where_clause {
        errors.push(syn::Error::new_spanned(
            where_clause,
            "`where` clauses are not supported: an executor is registered once, \
             so use concrete types",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "variadic parameters are not supported: pass a `Vec<T>` instead",
        ));
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

/// Whether the parameter is marked `#[secret]`; a marker with arguments, or on a
/// parameter that is not stored (`Data<T>`, `Context`), is an error.
fn secret_attr(attrs: &[syn::Attribute], kind: &Kind, errors: &mut Vec<syn::Error>) -> bool {
    let mut secret = false;
    for attr in attrs.iter().filter(|a| is_secret(a)) {
        if !matches!(attr.meta, syn::Meta::Path(_)) {
            errors.push(syn::Error::new_spanned(
                attr,
                "`#[secret]` takes no arguments: the keys are given to the runtime builder \
                 (`Builder::secret_key`)",
            ));
        } else if !matches!(kind, Kind::Persisted) {
            errors.push(syn::Error::new_spanned(
                attr,
                "`#[secret]` marks a stored argument; `Data<T>` and `Context` are not stored: \
                 remove it",
            ));
        }
        secret = true;
    }
    secret
}

/// Whether `attr` is the `#[secret]` marker.
pub(crate) fn is_secret(attr: &syn::Attribute) -> bool {
    attr.path().is_ident("secret")
}

/// The function's parameters without their `#[secret]` markers (which are not
/// attributes rustc knows), for the body kept inside the wrapper.
pub(crate) fn strip_secrets(
    inputs: &syn::punctuated::Punctuated<FnArg, syn::Token![,]>,
) -> syn::punctuated::Punctuated<FnArg, syn::Token![,]> {
    let mut inputs = inputs.clone();
    for input in inputs.iter_mut() {
        if let FnArg::Typed(pat_type) = input {
            pat_type.attrs.retain(|a| !is_secret(a));
        }
    }
    inputs
}

/// `name` or `mut name`; `None` for any other pattern.
fn plain_ident(pat: &Pat) -> Option<Ident> {
    match pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => Some(p.ident.clone()),
        _ => None,
    }
}

/// Rejects references and `impl Trait`, wherever they appear in `ty`.
fn check_type(ty: &Type, errors: &mut Vec<syn::Error>) {
    match ty {
        Type::Reference(r) => errors.push(syn::Error::new_spanned(
            r,
            "parameters are persisted, so they must be owned: use `String`/`Vec<T>`/... \
             instead of a reference",
        )),
        Type::ImplTrait(i) => errors.push(syn::Error::new_spanned(
            i,
            "`impl Trait` parameters are not supported: parameters are persisted, \
             so use a concrete type",
        )),
        Type::Paren(p) => check_type(&p.elem, errors),
        Type::Group(g) => check_type(&g.elem, errors),
        Type::Array(a) => check_type(&a.elem, errors),
        Type::Slice(s) => check_type(&s.elem, errors),
        Type::Tuple(t) => t.elems.iter().for_each(|elem| check_type(elem, errors)),
        Type::Path(p) => {
            if let Some(qself) = &p.qself {
                check_type(&qself.ty, errors);
            }
            for segment in &p.path.segments {
                if let PathArguments::AngleBracketed(args) = &segment.arguments {
                    for arg in &args.args {
                        if let GenericArgument::Type(ty) = arg {
                            check_type(ty, errors);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// Classifies by the last path segment: `Data<T>` and `Context` are injected,
/// everything else is persisted.
pub(crate) fn classify(ty: &Type) -> Kind {
    let path = match ty {
        Type::Paren(p) => return classify(&p.elem),
        Type::Group(g) => return classify(&g.elem),
        Type::Path(p) if p.qself.is_none() => &p.path,
        _ => return Kind::Persisted,
    };
    let Some(last) = path.segments.last() else {
        return Kind::Persisted;
    };
    match &last.arguments {
        PathArguments::None if last.ident == "Context" => Kind::Context,
        PathArguments::AngleBracketed(args) if last.ident == "Data" && args.args.len() == 1 => {
            match &args.args[0] {
                GenericArgument::Type(inner) => Kind::Data(Box::new(inner.clone())),
                _ => Kind::Persisted,
            }
        }
        _ => Kind::Persisted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn errors(item: ItemFn) -> Vec<String> {
        check(&item)
            .expect_err("expected errors")
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn classifies_parameters() {
        let item: ItemFn = syn::parse_quote! {
            async fn f(
                mut a: i64,
                b: Vec<String>,
                m: Data<Mailer>,
                q: async_exec::Data<sqlx::SqlitePool>,
                ctx: Context,
                c: ::async_exec::Context,
                d: Data,
                e: Data<A, B>,
                g: Context<X>,
            ) {}
        };
        let params = check(&item).unwrap();
        let kinds: Vec<String> = params
            .iter()
            .map(|p| match &p.kind {
                Kind::Persisted => format!("{}:P", p.ident),
                Kind::Data(t) => format!("{}:D({})", p.ident, t.to_token_stream()),
                Kind::Context => format!("{}:C", p.ident),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "a:P",
                "b:P",
                "m:D(Mailer)",
                "q:D(sqlx :: SqlitePool)",
                "ctx:C",
                "c:C",
                "d:P",
                "e:P",
                "g:P"
            ]
        );
    }

    #[test]
    fn secret_marks_stored_parameters_only() {
        let params = check(&syn::parse_quote! {
            async fn f(#[secret] card: String, amount: i64) {}
        })
        .unwrap();
        assert!(params[0].secret && !params[1].secret);
        let errs = errors(syn::parse_quote! {
            async fn f(#[secret] m: Data<Mailer>, #[secret(x)] c: String) {}
        });
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("`Data<T>` and `Context` are not stored"));
        assert!(errs[1].contains("takes no arguments"));
    }

    #[test]
    fn accepts_plain_async_fn() {
        let item: ItemFn =
            syn::parse_quote! { pub(crate) async fn f() -> anyhow::Result<()> { Ok(()) } };
        assert!(check(&item).unwrap().is_empty());
    }

    #[test]
    fn rejects_signature_problems_all_at_once() {
        let errs = errors(syn::parse_quote! {
            const unsafe extern "C" fn f<T>(x: T) where T: Clone {}
        });
        assert_eq!(errs.len(), 6, "{errs:?}");
        assert!(errs[0].contains("remove `const`"));
        assert_eq!(
            errs[1],
            "the `async` keyword is missing: #[async_exec] goes on an `async fn`"
        );
        assert!(errs[2].contains("remove `unsafe`"));
        assert!(errs[3].contains("remove the ABI"));
        assert!(errs[4].starts_with("generic parameters"));
        assert!(errs[5].starts_with("`where` clauses"));
    }

    #[test]
    fn rejects_parameter_problems() {
        let errs = errors(syn::parse_quote! {
            async fn f(&self, a: &str, b: Vec<&mut u8>, c: impl Display, (d, e): (i64, i64), _: u8, ref g: u8) {}
        });
        assert_eq!(errs.len(), 7, "{errs:?}");
        assert_eq!(
            errs[0],
            "a method of a service needs #[async_exec] on its `impl` block too \
             (`#[async_exec] impl Mailer { .. }`), and the instance registered with \
             `Builder::service`"
        );
        assert!(errs[1].starts_with("parameters are persisted, so they must be owned"));
        assert!(errs[2].starts_with("parameters are persisted, so they must be owned"));
        assert!(errs[3].starts_with("`impl Trait` parameters are not supported"));
        assert!(errs[4].contains("use a plain identifier"));
        assert!(errs[5].contains("use a plain identifier"));
        assert!(errs[6].contains("use a plain identifier"));
    }
}
