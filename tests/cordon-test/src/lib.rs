//! `#[cordon_test::test]`, the attribute every integration test is declared with. The
//! integration binaries (tests/it, tests/compat) use their own harness, `tests/runner`, which
//! runs each test in a process of its own and counts a skipped test as skipped; the built-in
//! `#[test]` and `#[tokio::test]` cannot be used there, since without libtest they compile to
//! nothing. This attribute keeps the function as written and registers it in the runner's list
//! (a `linkme` distributed slice), so declaring a test is the whole registration and none can
//! be left out of a hand-kept list.
//!
//! An `async fn` gets a Tokio runtime as with `#[tokio::test]`: the same arguments
//! (`flavor = "multi_thread"`, `worker_threads = N`), the current-thread runtime by default.
//! `#[ignore]` / `#[ignore = "why"]` below the attribute works as with libtest.
//!
//! The expansion names `crate::runner` (the runner module each binary includes) and `::linkme`
//! (a dev-dependency of the package), so it is only meant for these two binaries.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, ItemFn, Lit, Meta, MetaNameValue, ReturnType, Token};

/// Declares and registers one integration test.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = Tokens::from(args);
    let item = syn::parse_macro_input!(item as ItemFn);
    expand(args, item)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(args: Tokens, mut item: ItemFn) -> syn::Result<Tokens> {
    let sig = &item.sig;
    if !sig.inputs.is_empty() || !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.span(),
            "a test takes no arguments and no generics",
        ));
    }
    if !matches!(sig.output, ReturnType::Default) {
        return Err(syn::Error::new(
            sig.output.span(),
            "a test returns (); assert or panic to fail",
        ));
    }
    let runtime = runtime_attribute(args, sig.asyncness.is_some())?;
    let ignore = take_ignore(&mut item.attrs)?;
    if let Some(attr) = item
        .attrs
        .iter()
        .find(|a| a.path().is_ident("should_panic"))
    {
        // No test uses it; rather than half-support it, say so where it is written.
        return Err(syn::Error::new(
            attr.span(),
            "#[should_panic] is not supported by tests/runner: assert on \
             std::panic::catch_unwind's result instead",
        ));
    }
    let ignore = match ignore {
        None => quote!(::core::option::Option::None),
        Some(why) => quote!(::core::option::Option::Some(#why)),
    };
    let ident = &item.sig.ident;
    let name = ident.to_string();
    Ok(quote! {
        #runtime
        #item

        const _: () = {
            #[::linkme::distributed_slice(crate::runner::TESTS)]
            static REGISTRATION: crate::runner::Test = crate::runner::Test {
                module: ::core::module_path!(),
                name: #name,
                run: #ident,
                ignored: #ignore,
            };
        };
    })
}

/// `#[tokio::main(...)]` for an async test, with `#[tokio::test]`'s default flavour
/// (current-thread; `tokio::main` alone would default to multi-thread). A sync test takes no
/// arguments.
fn runtime_attribute(args: Tokens, is_async: bool) -> syn::Result<Tokens> {
    if !is_async {
        if !args.is_empty() {
            return Err(syn::Error::new(
                args.span(),
                "runtime arguments are for `async fn` tests only",
            ));
        }
        return Ok(Tokens::new());
    }
    let parsed = syn::parse::Parser::parse2(
        Punctuated::<MetaNameValue, Token![,]>::parse_terminated,
        args.clone(),
    )?;
    let names_flavor = parsed.iter().any(|kv| kv.path.is_ident("flavor"));
    Ok(if names_flavor {
        quote!(#[::tokio::main(#args)])
    } else if args.is_empty() {
        quote!(#[::tokio::main(flavor = "current_thread")])
    } else {
        quote!(#[::tokio::main(flavor = "current_thread", #args)])
    })
}

/// Removes `#[ignore]` / `#[ignore = "why"]` from the function (it means nothing to rustc
/// outside libtest) and returns its reason ("" when none is given).
fn take_ignore(attrs: &mut Vec<Attribute>) -> syn::Result<Option<String>> {
    let Some(at) = attrs.iter().position(|a| a.path().is_ident("ignore")) else {
        return Ok(None);
    };
    let attr = attrs.remove(at);
    match &attr.meta {
        Meta::Path(_) => Ok(Some(String::new())),
        Meta::NameValue(MetaNameValue {
            value: Expr::Lit(ExprLit {
                lit: Lit::Str(why), ..
            }),
            ..
        }) => Ok(Some(why.value())),
        _ => Err(syn::Error::new(
            attr.span(),
            "expected #[ignore] or #[ignore = \"reason\"]",
        )),
    }
}
