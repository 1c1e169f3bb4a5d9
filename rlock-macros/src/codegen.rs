//! Code generation: the annotated function with its block wrapped in `run_locked`.
//!
//! The signature is emitted as written and only the block is replaced, so callers, trait
//! impls and docs see the same function. The body's tokens, as the user wrote them (see
//! `item`), are moved into an `async move` block, so errors and panics inside it keep
//! pointing at the user's code.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{Ident, LitStr, Path, Type};

use crate::args::{Args, OnLost};
use crate::attribute::Attribute;
use crate::item::LockedFn;
use crate::resolve::{KeyPart, Value};

/// The runtime crate's path: `crate = "…"`, else the name it has in the user's Cargo.toml.
fn runtime_path(explicit: Option<&Path>) -> Path {
    if let Some(path) = explicit {
        return path.clone();
    }
    let default = || syn::parse_quote!(::rlock_runtime);
    match proc_macro_crate::crate_name("rlock-runtime") {
        Ok(proc_macro_crate::FoundCrate::Name(name)) => match syn::parse_str::<Ident>(&name) {
            Ok(ident) => syn::parse_quote!(::#ident),
            Err(_) => default(),
        },
        // `Itself` (the runtime's own doc tests, examples and benches, which link it under its
        // own name) and lookup errors: the plain name.
        _ => default(),
    }
}

/// One key the function locks: its template and its resolved parts.
pub(crate) struct LockedKey {
    pub(crate) template: LitStr,
    pub(crate) parts: Vec<KeyPart>,
}

pub(crate) fn generate(
    attribute: Attribute,
    func: &LockedFn,
    args: &Args,
    ret_ty: &Type,
    keys: &[LockedKey],
) -> TokenStream {
    let krate = runtime_path(args.krate.as_ref());
    let module = crate::private::module();
    let private = quote!(#krate::#module);
    let LockedFn {
        attrs,
        inner_attrs,
        vis,
        sig,
        body,
    } = func;

    // Type checks, reported on the user's own tokens (the sqlx trick).
    // The Display check and the key's `.value(…)` take the very same tokens, so rustc reports
    // a missing `Display` once, on the parameter's type, instead of once per use.
    // The call is spanned on the key and its argument on the type, so that a missing
    // `Display` is shown at both: the placeholder that needs it and the type that lacks it.
    let mut checks = Vec::new();
    for key in keys {
        let key_span = key.template.span();
        for part in &key.parts {
            if let KeyPart::Value(Value {
                expr,
                type_span: Some(span),
            }) = part
            {
                let arg = quote_spanned!(*span=> &#expr);
                let check = respan(quote!(#private::key_placeholder_needs_display), key_span);
                checks.push(quote_spanned!(key_span=> #check(#arg);));
            }
        }
    }

    let client = match &args.client {
        Some(expr) => {
            let to_client = quote_spanned!(expr.span()=> #private::ClientRef::to_client(&(#expr)));
            quote!(::core::result::Result::Ok::<#private::LockClient, #private::LockError>(#to_client))
        }
        None => quote!(#private::default_client()),
    };

    // Each key built from its parts.
    let built = keys.iter().map(|key| {
        let parts = key.parts.iter().map(|part| match part {
            KeyPart::Literal(text) => quote!(.literal(#text)),
            KeyPart::Value(Value {
                expr,
                type_span: Some(span),
            }) => {
                let arg = quote_spanned!(*span=> &#expr);
                quote!(.value(#arg))
            }
            KeyPart::Value(Value { expr, .. }) => quote!(.value(&#expr)),
        });
        quote!(#private::KeyBuilder::new() #(#parts)* .finish())
    });

    let millis = |ms: u64| quote!(#private::Duration::from_millis(#ms));
    let mut options = quote!(#private::LockOptions::new());
    if let Some(ttl) = args.ttl {
        let ttl = millis(ttl.value.0);
        options.extend(quote!(.ttl(#ttl)));
    }
    // Without `wait` or `on_lost`, the client's defaults apply.
    if let Some(wait) = args.wait {
        let wait = millis(wait.value.0);
        options.extend(quote!(.wait(#wait)));
    }
    let renew = args.renew.as_ref().is_none_or(|renew| renew.value);
    options.extend(quote!(.renew(#renew)));
    if let Some(max_hold) = args.max_hold {
        let max_hold = millis(max_hold.value.0);
        options.extend(quote!(.max_hold(#max_hold)));
    }
    if let Some(min_hold) = args.min_hold {
        let min_hold = millis(min_hold.value.0);
        options.extend(quote!(.min_hold(#min_hold)));
    }
    if let Some(on_lost) = args.on_lost {
        let on_lost = match on_lost {
            OnLost::Abort => quote!(#private::OnLost::Abort),
            OnLost::Continue => quote!(#private::OnLost::Continue),
        };
        options.extend(quote!(.on_lost(#on_lost)));
    }
    if args.fence.is_some() {
        // A fence costs a second key write per acquisition: only when the body binds it.
        options.extend(quote!(.fenced(true)));
    }
    if let Some(replicas) = args.min_replicas {
        options.extend(quote!(.min_replicas(#replicas)));
    }
    if args.fair.as_ref().is_some_and(|fair| fair.value) {
        options.extend(quote!(.fair(true)));
    }
    // The template, not the rendered key, labels the exported metrics (`keys`' templates
    // joined by commas).
    let templates: Vec<String> = keys.iter().map(|key| key.template.value()).collect();
    let label = templates.join(",");
    options.extend(quote!(.metrics_label(#label)));

    let fence = args
        .fence
        .as_ref()
        .map(|name| quote!(let #name: u64 = __rlock_fence;));

    // Pins the async block's output to the declared return type, so `?` and `return` in the
    // body convert errors exactly as they would in the original fn (tracing-attributes' trick).
    let fake_return = quote_spanned! {ret_ty.span()=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::let_with_type_underscore,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let __rlock_return: #ret_ty = loop {};
            return __rlock_return;
        }
    };

    // The body's contents, not its block: a block as the async block's tail would draw
    // `unused_braces` on every one-line body, and the fix the lint suggests breaks the code.
    let body = if attribute == Attribute::SingleFlight {
        quote! {
            move || async move {
                #fake_return
                #body
            }
        }
    } else {
        quote! {
            move |__rlock_fence: u64| async move {
                #fake_return
                #fence
                #body
            }
        }
    };
    // The return type's one requirement (`LockResult`) is named here, on the return type's own
    // tokens: a function that cannot return a lock error gets one error, on its return type.
    let outcome = quote_spanned!(ret_ty.span()=> <#ret_ty as #private::LockResult>::OUTCOME);
    let taking = attribute.taking(
        &private,
        args.permits.map(|(permits, _)| permits),
        args.take.map(|(take, _)| take),
    );

    // One key (`key`) or all of several (`keys`).
    let built: Vec<TokenStream> = built.collect();
    let call = if attribute == Attribute::SingleFlight {
        // The return type's requirements (a `Result` whose value serializes, whose error
        // takes a lock error) are one trait, named on the return type's own tokens.
        let run_once = quote_spanned! {ret_ty.span()=>
            <#ret_ty as #private::SharedResult>::run_once(
                __rlock_client,
                __rlock_key,
                __rlock_options,
                __rlock_body,
            )
            .await
        };
        quote! {
            let __rlock_key = #(#built)*;
            let __rlock_options = #options;
            let __rlock_body = #body;
            #run_once
        }
    } else if args.keys.is_some() {
        quote! {
            let __rlock_keys = ::std::vec![#(#built),*];
            let __rlock_options = #options;
            #private::run_locked_all(
                __rlock_client,
                __rlock_keys,
                __rlock_options,
                #outcome,
                #body,
            )
            .await
        }
    } else {
        quote! {
            let __rlock_key = #(#built)*;
            let __rlock_options = #options;
            #private::run_locked(
                __rlock_client,
                #taking,
                __rlock_key,
                __rlock_options,
                #outcome,
                #body,
            )
            .await
        }
    };

    quote! {
        #(#attrs)*
        #inner_attrs
        #vis #sig {
            #[allow(unreachable_code, clippy::unit_arg)]
            if false {
                #(#checks)*
            }
            let __rlock_client = #client;
            #call
        }
    }
}

/// `tokens` with every span set to `span` (a path written by the macro, reported as the
/// user's code).
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}
