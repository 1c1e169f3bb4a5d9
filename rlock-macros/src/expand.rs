//! The attribute's entry point: every check runs (signature, options, key), their errors are
//! reported together, and only a valid function is rewritten (see `codegen`). On any error
//! the original item is emitted unchanged beside the `compile_error!`, so one mistake
//! produces one error and IDEs keep working.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::LitStr;

use crate::args::Args;
use crate::attribute::Attribute;
use crate::codegen::{LockedKey, generate};
use crate::errors::Errors;
use crate::item::LockedFn;
use crate::resolve::resolve_key;
use crate::signature::Bindings;
use crate::validate::{check_async, return_type};

/// The whole attribute: the expansion, or the unchanged item plus the errors.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    attribute(Attribute::DistributedLock, args, item)
}

/// `attribute` on `item`: the expansion, or the unchanged item plus the errors.
pub(crate) fn attribute(attribute: Attribute, args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attribute, args, item.clone()) {
        Ok(tokens) => tokens,
        Err(err) => {
            let err = err.to_compile_error();
            quote! { #item #err }
        }
    }
}

fn expand(attribute: Attribute, args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    // Only attributes, visibility and signature are parsed (see `item`): a failure here is
    // about the item's shape, never about its body.
    let func: LockedFn = syn::parse2(item.clone()).map_err(|_| {
        syn::Error::new_spanned(
            &item,
            format!(
                "{} applies to an `async fn` with a body: a free function, or a method in an \
                 `impl` block",
                attribute.name()
            ),
        )
    })?;

    let mut errors = Errors::default();
    errors.keep(check_async(&func.sig, attribute));
    let ret_ty = errors.keep(return_type(&func.sig, attribute));
    let args = errors.keep(
        syn::parse2::<Args>(args).and_then(|args| args.check_combination(attribute).map(|()| args)),
    );
    let bindings = Bindings::of(&func.sig);
    // Every template resolved, `key`'s or each of `keys`' (validation refused both at once):
    // `None` when one failed (its error kept) or none was given (refused too).
    let templates: Vec<&LitStr> = match &args {
        Some(args) => match (&args.key, &args.keys) {
            (Some(key), _) => vec![key],
            (None, Some((keys, _))) => keys.iter().collect(),
            (None, None) => Vec::new(),
        },
        None => Vec::new(),
    };
    let mut keys = Vec::new();
    for template in templates {
        if let Some(parts) = errors.keep(resolve_key(template, &bindings, &func.sig)) {
            keys.push(LockedKey {
                template: template.clone(),
                parts,
            });
        }
    }
    errors.finish()?;
    match (args, ret_ty) {
        (Some(args), Some(ret_ty)) if !keys.is_empty() => {
            Ok(generate(attribute, &func, &args, &ret_ty, &keys))
        }
        // Every `None` above pushed an error, so `finish` has returned already.
        _ => Err(syn::Error::new(
            Span::call_site(),
            format!("invalid {}", attribute.name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: &str, item: &str) -> String {
        let args: TokenStream = args.parse().expect("test args lex");
        let item: TokenStream = item.parse().expect("test item lexes");
        distributed_lock(args, item).to_string()
    }

    fn error_of(args: &str, item: &str) -> String {
        let out = expand_str(args, item);
        assert!(
            out.contains("compile_error"),
            "expected an error for {args:?} / {item:?}:\n{out}"
        );
        out
    }

    /// `needle` with `__private` written as the runtime's versioned support module.
    fn versioned(needle: &str) -> String {
        needle.replace(
            ":: __private ::",
            &format!(":: {} ::", crate::private::module()),
        )
    }

    const ORDER: &str = "async fn create_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> { Ok(user_id) }";

    #[test]
    fn expands_the_documented_shape() {
        let out = expand_str(
            r#"key = "order:<user_id>", ttl = "10s", crate = "::rt""#,
            ORDER,
        );
        for needle in [
            "async fn create_order (user_id : u64 , voucher_id : u64) -> Result < u64 , AppError >",
            ":: rt :: __private :: default_client ()",
            ". literal (\"order:\") . value (& user_id) . finish ()",
            ". ttl (:: rt :: __private :: Duration :: from_millis (10000u64))",
            // No `wait` or `on_lost` given: the client's defaults apply. The template labels
            // the exported metrics.
            "(10000u64)) . renew (true) . metrics_label (\"order:<user_id>\") ;",
            ":: rt :: __private :: key_placeholder_needs_display (& user_id)",
            "< Result < u64 , AppError > as :: rt :: __private :: LockResult > :: OUTCOME",
            "move | __rlock_fence : u64 | async move",
            "let __rlock_return : Result < u64 , AppError > = loop { } ;",
            // The body's tokens, without their block's braces.
            "return __rlock_return ; } Ok (user_id) } ,",
        ] {
            let needle = versioned(needle);
            assert!(out.contains(&needle), "missing {needle:?} in\n{out}");
        }
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains("max_hold"), "{out}");
        assert!(
            !out.contains(". wait") && !out.contains(". on_lost"),
            "{out}"
        );
        assert!(!out.contains(". fair"), "{out}");
    }

    #[test]
    fn fair_waiting_reaches_the_options() {
        let out = expand_str(
            r#"key = "order:<user_id>", wait = "5s", fair = true"#,
            ORDER,
        );
        assert!(out.contains(". fair (true)"), "{out}");
        let out = expand_str(
            r#"key = "order:<user_id>", wait = "5s", fair = false"#,
            ORDER,
        );
        assert!(!out.contains(". fair"), "{out}");
    }

    #[test]
    fn client_fence_and_fields() {
        let out = expand_str(
            r#"key = "job:<self.name>:<req.user.0>", client = self.locks, fence = token, max_hold = "5m", on_lost = "continue", crate = "rt""#,
            "pub async fn run(&mut self, req: Req) -> Result<(), E> { Ok(()) }",
        );
        for needle in [
            "rt :: __private :: ClientRef :: to_client (& (self . locks))",
            ". value (& self . name)",
            ". value (& req . user . 0)",
            "let token : u64 = __rlock_fence ;",
            ". max_hold (rt :: __private :: Duration :: from_millis (300000u64))",
            "OnLost :: Continue",
        ] {
            let needle = versioned(needle);
            assert!(out.contains(&needle), "missing {needle:?} in\n{out}");
        }
        // Fields' types are not written down, so there is no Display assertion for them.
        assert!(!out.contains("key_placeholder_needs_display"), "{out}");
    }

    #[test]
    fn keyword_fields_are_raw() {
        let out = expand_str(
            r#"key = "k:<a.type>""#,
            "async fn f(a: A) -> Result<(), E> { Ok(()) }",
        );
        assert!(out.contains("a . r#type"), "{out}");
    }

    #[test]
    fn errors_keep_the_item_unchanged() {
        let item = "async fn f(id: u64) -> Result<(), E> { Ok(()) }";
        let out = error_of(r#"ttl = "1s""#, item);
        assert!(
            out.starts_with("async fn f (id : u64) -> Result < () , E > { Ok (()) }"),
            "{out}"
        );
        assert!(out.contains("missing `key`"), "{out}");
        assert!(!out.contains("run_locked"), "{out}");
    }

    #[test]
    fn signature_errors() {
        for (args, item, needle) in [
            (
                r#"key = "k""#,
                "fn f() -> Result<(), E> { Ok(()) }",
                "needs an `async fn`",
            ),
            (r#"key = "k""#, "async fn f() { }", "add a return type"),
            (
                r#"key = "k""#,
                "async fn f() -> () { }",
                "`()` is the unit type",
            ),
            (r#"key = "k""#, "async fn f() -> (u8, u8) { }", "is a tuple"),
            (
                r#"key = "k""#,
                "async fn f() -> &'static str { }",
                "`&'static str` is a reference",
            ),
            (
                r#"key = "k""#,
                "async fn f() -> impl Sized { }",
                "an `impl Trait`",
            ),
            (r#"key = "k""#, "struct S;", "applies to an `async fn`"),
            (
                r#"key = "<user_di>""#,
                ORDER,
                "no parameter named `user_di`; did you mean `user_id`?",
            ),
            (
                r#"key = "<zzz>""#,
                ORDER,
                "the key can use: `user_id`, `voucher_id`",
            ),
            (
                r#"key = "<x>""#,
                "async fn f() -> Result<(), E> { Ok(()) }",
                "no parameters",
            ),
            (r#"key = "<self.id>""#, ORDER, "has no `self` receiver"),
            (
                r#"key = "<_>""#,
                "async fn f(_: u8) -> Result<(), E> { Ok(()) }",
                "binds no value",
            ),
            (
                r#"key = "<user_id><voucher_id>""#,
                ORDER,
                "need a separator",
            ),
            (
                r#"key = "<a.self>""#,
                "async fn f(a: u8) -> Result<(), E> { Ok(()) }",
                "cannot be a field",
            ),
            (
                r#"key = "<a.99999999999>""#,
                "async fn f(a: u8) -> Result<(), E> { Ok(()) }",
                "too large",
            ),
        ] {
            let out = error_of(args, item);
            assert!(out.contains(needle), "{args} / {item}: {out}");
        }
    }

    #[test]
    fn error_types_that_cannot_hold_a_lock_error_get_the_fix() {
        for (ret, error) in [
            ("Result<u64, String>", "`String` cannot hold"),
            ("Result<(), &'static str>", "`&'static str` cannot hold"),
            ("std::result::Result<u8, ()>", "`()` cannot hold"),
        ] {
            let err = error_of(
                r#"key = "k""#,
                &format!("async fn f() -> {ret} {{ todo!() }}"),
            );
            assert!(err.contains(error), "{ret}: {err}");
            assert!(
                err.contains("LockError>`, or an error type"),
                "{ret}: {err}"
            );
        }
        let ok = expand_str(
            r#"key = "k""#,
            "async fn f() -> Result<u64, MyError> { todo!() }",
        );
        assert!(!ok.contains("compile_error"), "{ok}");
    }

    #[test]
    fn other_tools_placeholders_naming_parameters_are_refused() {
        let item = "async fn f(&self, user_id: u64, req: Req) -> Result<(), E> { Ok(()) }";
        for (key, fixed) in [
            ("order:{user_id}", "order:<user_id>"),
            ("#user_id", "<user_id>"),
            ("a:${req.id}:#{self.t}", "a:<req.id>:<self.t>"),
        ] {
            let err = error_of(&format!("key = {key:?}"), item);
            assert!(err.contains("literal text, not"), "{key}: {err}");
            assert!(
                err.contains(&format!("key = \\\"{fixed}\\\"")),
                "{key}: {err}"
            );
        }
        // Names that are no parameter stay literal: a hash tag, an escaped brace.
        for key in [
            "{orders}:<user_id>",
            "{{user_id}}:<user_id>",
            "#tag:<user_id>",
        ] {
            let out = expand_str(&format!("key = {key:?}"), item);
            assert!(!out.contains("compile_error"), "{key}: {out}");
        }
    }

    #[test]
    fn a_body_that_does_not_parse_is_left_to_rustc() {
        let out = expand_str(
            r#"key = "order:<user_id>""#,
            "async fn f(user_id: u64) -> Result<(), E> { #![allow(unused)] let x = ; Ok(()) }",
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.starts_with("# [allow (unused)] async fn f"), "{out}");
        assert!(out.contains("let x = ; Ok (()) } ,"), "{out}");
    }

    #[test]
    fn independent_errors_are_all_reported() {
        let out = error_of(r#"key = "<nope>""#, "fn f() { }");
        assert!(out.contains("needs an `async fn`"), "{out}");
        assert!(out.contains("add a return type"), "{out}");
        assert!(out.contains("no parameter named `nope`"), "{out}");
    }
}
