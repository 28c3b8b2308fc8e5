//! `#[async_exec]` on an `impl` block: the methods marked `#[async_exec(type = ...)]`
//! become executors run on the service's registered instance.
//!
//! Each marked `async fn name(&self, ...)` becomes, inside the impl, a plain
//! `fn name(&self, <persisted>) -> Call` (the caller's instance is not used: the runtime
//! runs the body on the instance registered with `Builder::service`), a hidden
//! `async fn` with the body as written, and a hidden run function; beside the impl, the
//! args struct, the `ExecutorDef` (which needs the service's instance, checked at
//! `start()`) and its registration.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::{FnArg, ImplItem, ImplItemFn, ItemFn, ItemImpl};

use crate::attr::{self, Args};
use crate::parts::{
    args_derive, args_error, async_span, call_args, def_fields, default_crate_path, return_span,
    run_body, with_error, wrapper_params, Fields,
};
use crate::validate::{self, Param};

/// Whether `attr` is `#[async_exec(...)]` (any path ending in `async_exec`).
fn is_async_exec(attr: &syn::Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "async_exec")
}

/// The impl block, its marked methods expanded; every error found reported.
pub(crate) fn service(args: TokenStream, mut item: ItemImpl) -> TokenStream {
    let mut errors: Vec<syn::Error> = Vec::new();
    let c = match service_args(args) {
        Ok(c) => c,
        Err(e) => {
            errors.push(e);
            default_crate_path()
        }
    };
    if let Some((_, trait_path, _)) = &item.trait_ {
        errors.push(syn::Error::new_spanned(
            trait_path,
            "#[async_exec] goes on an inherent `impl` block (`impl Mailer { .. }`), not on \
             a trait's: the methods it makes are the service's own",
        ));
    }
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &item.generics,
            "a service is registered once, as one type: generic parameters on its `impl` are \
             not supported; use a concrete type",
        ));
    }
    let self_ty = (*item.self_ty).clone();
    let type_name: String = self_ty
        .to_token_stream()
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let mut items = Vec::with_capacity(item.items.len());
    let mut beside = TokenStream::new();
    for impl_item in std::mem::take(&mut item.items) {
        let ImplItem::Fn(method) = impl_item else {
            items.push(impl_item);
            continue;
        };
        let Some(at) = method.attrs.iter().position(is_async_exec) else {
            items.push(ImplItem::Fn(method));
            continue;
        };
        match method_executor(&c, &self_ty, &type_name, method, at) {
            Ok((in_impl, outside)) => {
                items.extend(in_impl);
                beside.extend(outside);
            }
            Err(failed) => {
                let (kept, error) = *failed;
                items.push(ImplItem::Fn(kept));
                errors.push(error);
            }
        }
    }
    item.items = items;
    let expanded = quote!(#item #beside);
    let mut errors = errors.into_iter();
    match errors.next() {
        None => expanded,
        Some(mut first) => {
            first.extend(errors);
            with_error(expanded, first)
        }
    }
}

/// The crate path of the impl's attribute: nothing, or `crate = "path"`.
fn service_args(args: TokenStream) -> syn::Result<syn::Path> {
    if args.is_empty() {
        return Ok(default_crate_path());
    }
    match attr::find_crate_path(&args) {
        Some(path) if args.clone().into_iter().count() == 3 => Ok(path),
        _ => Err(syn::Error::new_spanned(
            args,
            "on an `impl` block #[async_exec] takes no arguments (but `crate = \"path\"`): \
             put `type = ...` and the rest on each method, `#[async_exec(type = SaveAsync)]`",
        )),
    }
}

/// A marked method's items in the impl, and the items beside the impl.
type Expanded = (Vec<ImplItem>, TokenStream);

/// A marked method as written (without the attribute), and why it is refused.
type Refused = (ImplItemFn, syn::Error);

/// What a marked method becomes: items of the impl and items beside it. On an error,
/// the method as written (without the attribute and `#[secret]`) and the error.
fn method_executor(
    c: &syn::Path,
    self_ty: &syn::Type,
    type_name: &str,
    mut method: ImplItemFn,
    at: usize,
) -> Result<Expanded, Box<Refused>> {
    let marker = method.attrs.remove(at);
    let fail = |mut method: ImplItemFn, error: syn::Error| {
        method.sig.inputs = validate::strip_secrets(&method.sig.inputs);
        Err(Box::new((method, error)))
    };
    let args_tokens = match &marker.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    };
    let args = syn::parse2::<Args>(args_tokens);
    if let Err(error) = check_receiver(&method) {
        return fail(method, error);
    }
    // The signature without `&self`, checked as a free function's.
    let as_free = ItemFn {
        attrs: method.attrs.clone(),
        vis: method.vis.clone(),
        sig: syn::Signature {
            inputs: method
                .sig
                .inputs
                .iter()
                .filter(|input| matches!(input, FnArg::Typed(_)))
                .cloned()
                .collect(),
            ..method.sig.clone()
        },
        block: Box::new(method.block.clone()),
    };
    let (args, params) = match (args, validate::check(&as_free)) {
        (Ok(args), Ok(params)) => (args, params),
        (Err(mut e), Err(more)) => {
            e.combine(more);
            return fail(method, e);
        }
        (Err(e), _) | (_, Err(e)) => return fail(method, e),
    };
    if let Some(error) = args_error(&args, &params) {
        return fail(method, error);
    }
    let c = args.crate_path.clone().unwrap_or_else(|| c.clone());
    Ok(generate(&c, &args, self_ty, type_name, &method, &params))
}

/// Only `&self`: the registered instance is shared by every request.
fn check_receiver(method: &ImplItemFn) -> syn::Result<()> {
    let receiver = method.sig.inputs.iter().find_map(|input| match input {
        FnArg::Receiver(receiver) => Some(receiver),
        FnArg::Typed(_) => None,
    });
    match receiver {
        None => Err(syn::Error::new_spanned(
            &method.sig.ident,
            "an executor of a service takes `&self` (the registered instance runs it); for \
             a function without `self`, put #[async_exec] on a free function instead",
        )),
        Some(r) if r.reference.is_none() || r.colon_token.is_some() => {
            Err(syn::Error::new_spanned(
                r,
                "an executor of a service takes `&self`: the runtime runs it on the one \
                 instance registered with `Builder::service`, shared by every request",
            ))
        }
        Some(r) if r.mutability.is_some() => Err(syn::Error::new_spanned(
            r,
            "`&mut self` is not supported: the registered instance is shared by every \
             request running at once; take `&self` and keep mutable state behind a `Mutex`",
        )),
        Some(_) => Ok(()),
    }
}

fn generate(
    c: &syn::Path,
    args: &Args,
    self_ty: &syn::Type,
    type_name: &str,
    method: &ImplItemFn,
    params: &[Param],
) -> Expanded {
    let sig = &method.sig;
    let fn_name = &sig.ident;
    let bare = fn_name.unraw().to_string();
    let vis = &method.vis;
    let output = &sig.output;
    let block = &method.block;
    let inputs = validate::strip_secrets(&sig.inputs);
    let (attrs, body_attrs) = crate::placement::split(&method.attrs, &bare);
    let def_site = Span::mixed_site();
    let unique = format!(
        "{}_{bare}",
        type_name.replace(|ch: char| !ch.is_ascii_alphanumeric(), "_")
    );
    let args_struct = format_ident!("__AsyncExecArgs_{}", unique);
    let def_static = format_ident!("__ASYNC_EXEC_DEF_{}", unique);
    let body_fn = format_ident!("__async_exec_body_{}", bare);
    let run_fn = format_ident!("__async_exec_run_{}", bare);
    let inv = format_ident!("__inv", span = def_site);
    let decoded = format_ident!("__args", span = def_site);
    let service = format_ident!("__service", span = def_site);
    let serde_crate = format!(
        "{}::__private::serde",
        c.to_token_stream().to_string().replace(' ', "")
    );

    let wrapper_params = wrapper_params(params);
    let Fields {
        persisted,
        fields,
        types,
    } = Fields::of(params);
    let call_args = call_args(params, &fields, &decoded, &inv);
    let ret_span = return_span(output, fn_name);
    let run_body = run_body(
        c,
        &inv,
        ret_span,
        quote_spanned! {ret_span=>
            #service.#body_fn(#(#call_args),*)
        },
    );
    let boxed_body = quote_spanned! {async_span(sig)=>
        ::std::boxed::Box::pin(async move {
            let #service = #inv.data::<Self>()?;
            let #decoded: #args_struct = #inv.decode()?;
            #run_body
        })
    };
    let derive = args_derive(c, sig);
    let path = quote!(::core::concat!(::core::module_path!(), "::", #type_name, "::", #bare));
    let name = match &args.name {
        Some(lit) => lit.to_token_stream(),
        None => path.clone(),
    };
    let service_need = quote!(#c::__private::DataNeed::service::<#self_ty>());
    let def_fields = def_fields(args, c, params, &[service_need]);
    let (partition, with_partition) = crate::partition::compute(args.partition.as_ref());

    let in_impl: Vec<ImplItem> = vec![
        syn::parse_quote! {
            #(#attrs)*
            #vis fn #fn_name(&self, #(#wrapper_params),*) -> #c::Call {
                // The call is the same whoever makes it: the registered instance runs it.
                let _ = self;
                #partition
                #c::Call::__new(&#def_static, &#args_struct { #(#fields: #persisted),* })
                    #with_partition
            }
        },
        syn::parse_quote! {
            #[doc(hidden)]
            #(#body_attrs)*
            async fn #body_fn(#inputs) #output #block
        },
        syn::parse_quote! {
            #[doc(hidden)]
            fn #run_fn(#inv: #c::__private::Invocation)
                -> #c::__private::BoxFuture<'static, ::core::result::Result<(), #c::__private::Failure>>
            {
                #boxed_body
            }
        },
    ];
    let outside = quote! {
        #derive
        #[serde(crate = #serde_crate)]
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        struct #args_struct { #(#fields: #types),* }

        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        static #def_static: #c::__private::ExecutorDef = #c::__private::ExecutorDef {
            name: #name,
            path: #path,
            #def_fields
            run: <#self_ty>::#run_fn,
        };
        #c::__private::inventory::submit! { #c::__private::Registration(&#def_static) }
    };
    (in_impl, outside)
}
