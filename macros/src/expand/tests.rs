//! Unit tests of the expansion of `#[async_exec]` on an `async fn`.

use super::*;
use crate::parts::{fnv1a64, sign_and_signature};

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
                modes: ::async_exec::__private::Modes {
                    unique_for_ms: ::core::option::Option::None,
                    debounce_ms: ::core::option::Option::None,
                    debounce_leading: false,
                },
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
        actual
            .contains("async fn __async_exec_body (card : String , r#ref : String , amount : i64)"),
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

#[test]
fn partition_is_computed_before_the_arguments_move() {
    let actual = expand_str(
        quote!(type = SaveAsync, queue = "webhooks", partition = format!("t-{}", tenant)),
        quote!(
            async fn deliver(tenant: String, event: String, h: Data<H>) {}
        ),
    );
    let computed = "let __async_exec_partition : :: std :: string :: String = :: std :: string :: ToString :: to_string (& (format ! (\"t-{}\" , tenant))) ;";
    let call = ":: async_exec :: Call :: __new (& __ASYNC_EXEC_DEF , & __AsyncExecArgs { tenant : tenant , event : event }) . __partition (__async_exec_partition)";
    let (at_computed, at_call) = (actual.find(computed), actual.find(call));
    assert!(
        at_computed.is_some() && at_call.is_some() && at_computed < at_call,
        "{actual}"
    );
    // Without `partition`, the call is as before.
    let plain = expand_str(
        quote!(type = SaveAsync, queue = "webhooks"),
        quote!(
            async fn deliver(tenant: String) {}
        ),
    );
    assert!(!plain.contains("partition"), "{plain}");
}

#[test]
fn a_partition_naming_what_the_call_lacks_emits_the_stub() {
    let actual = expand_str(
        quote!(type = SaveAsync, queue = "q", partition = ctx.attempt()),
        quote!(
            pub async fn f(a: i64, ctx: Context) {}
        ),
    );
    assert!(
        actual.starts_with("pub fn f (a : i64) -> :: async_exec :: Call {"),
        "{actual}"
    );
    assert!(!actual.contains("__partition"), "{actual}");
    assert_eq!(actual.matches("compile_error").count(), 1, "{actual}");
    assert!(
        actual.contains("`ctx` is injected when the body runs"),
        "{actual}"
    );
}

#[test]
fn a_service_method_computes_its_partition_in_its_wrapper() {
    let actual = expand_str(
        TokenStream::new(),
        quote!(
            impl Hooks {
                #[async_exec(type = SaveAsync, queue = "q", partition = account.tenant)]
                async fn deliver(&self, account: Account) {}
            }
        ),
    );
    assert!(
        actual.contains("fn deliver (& self , account : Account) -> :: async_exec :: Call { let _ = self ; let __async_exec_partition : :: std :: string :: String = :: std :: string :: ToString :: to_string (& (account . tenant)) ;"),
        "{actual}"
    );
    assert!(
        actual.contains(". __partition (__async_exec_partition) }"),
        "{actual}"
    );
    let refused = expand_str(
        TokenStream::new(),
        quote!(
            impl Hooks {
                #[async_exec(type = SaveAsync, queue = "q", partition = self.tenant)]
                async fn deliver(&self, account: Account) {}
            }
        ),
    );
    assert!(
        refused.contains("`self` is the caller's instance"),
        "{refused}"
    );
}
