//! Code generation for `#[async_exec]`.
//!
//! The annotated `async fn` becomes a plain `fn` of the same name, visibility,
//! attributes and persisted parameters that returns a `Call`. Inside it live the
//! serde args struct, the original body (as a nested `async fn`, unchanged), a
//! type-erased run function and the registered `ExecutorDef`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::ItemFn;

use crate::attr::{self, Args};
use crate::parts::{
    args_derive, args_error, async_span, call_args, def_fields, default_crate_path, return_span,
    run_body, with_error, wrapper_params, Fields,
};
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
        (Ok(args), Ok(params)) => match args_error(&args, &params) {
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
    let (partition, with_partition) = crate::partition::compute(args.partition.as_ref());

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

            #partition
            #c::Call::__new(&#def_static, &#args_struct { #(#fields: #persisted),* })
                #with_partition
        }
    }
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
mod tests;
