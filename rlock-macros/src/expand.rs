//! Code generation: the annotated function with its block wrapped in `run_locked`.
//!
//! The signature is emitted as written and only the block is replaced, so callers, trait
//! impls and docs see the same function. The user's block is moved as tokens into an
//! `async move` block (never re-printed), so errors and panics inside it keep pointing at the
//! user's code. On any error the original item is emitted unchanged beside the
//! `compile_error!`, so one mistake produces one error and IDEs keep working.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{Ident, ItemFn, LitStr, Member, Path, ReturnType, Signature, Type};

use crate::args::{Args, OnLost};
use crate::signature::Bindings;
use crate::suggest;
use crate::template::{self, Placeholder, Segment};

/// The whole attribute: the expansion, or the unchanged item plus the errors.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args, item.clone()) {
        Ok(tokens) => tokens,
        Err(err) => {
            let err = err.to_compile_error();
            quote! { #item #err }
        }
    }
}

/// Collects independent errors so that several mistakes are reported in one build.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let func: ItemFn = syn::parse2(item.clone()).map_err(|_| {
        syn::Error::new_spanned(
            &item,
            "#[distributed_lock] applies to an `async fn` with a body: a free function, \
             or a method in an `impl` block",
        )
    })?;

    let mut errors = Errors::default();
    if let Err(err) = check_async(&func.sig) {
        errors.push(err);
    }
    let ret_ty = match return_type(&func.sig) {
        Ok(ty) => Some(ty),
        Err(err) => {
            errors.push(err);
            None
        }
    };
    let args = match syn::parse2::<Args>(args).and_then(|args| args.validate().map(|()| args)) {
        Ok(args) => Some(args),
        Err(err) => {
            errors.push(err);
            None
        }
    };
    let bindings = Bindings::of(&func.sig);
    let key = match args.as_ref().and_then(|args| args.key.as_ref()) {
        Some(key) => match resolve_key(key, &bindings, &func.sig) {
            Ok(key) => Some(key),
            Err(err) => {
                errors.push(err);
                None
            }
        },
        None => None,
    };
    errors.finish()?;
    match (args, ret_ty, key) {
        (Some(args), Some(ret_ty), Some(key)) => Ok(generate(&func, &args, &ret_ty, &key)),
        // Every `None` above pushed an error, so `finish` has returned already.
        _ => Err(syn::Error::new(
            Span::call_site(),
            "invalid #[distributed_lock]",
        )),
    }
}

fn check_async(sig: &Signature) -> syn::Result<()> {
    if sig.asyncness.is_some() {
        return Ok(());
    }
    Err(syn::Error::new(
        sig.fn_token.span,
        format!(
            "#[distributed_lock] needs an `async fn`: the lock is held across the body's awaits \
             and released when it finishes; write `async fn {}(…)`",
            sig.ident
        ),
    ))
}

/// The declared return type, if it can be a `Result`.
///
/// Only the shape is checked here: a path type (`Result<T, E>`, `io::Result<T>`, an alias)
/// is accepted and then checked by the `LockResult` bound in the generated code.
fn return_type(sig: &Signature) -> syn::Result<Type> {
    const NEED: &str = "#[distributed_lock] needs the fn to return `Result<T, E>` with \
                        `E: From<LockError>`, so that failing to acquire the lock can be returned";
    let ty = match &sig.output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.paren_token.span.close(),
                format!("{NEED}; add a return type, as in `-> Result<(), LockError>`"),
            ));
        }
    };
    let mut inner: &Type = ty;
    loop {
        match inner {
            Type::Group(group) => inner = &group.elem,
            Type::Paren(paren) => inner = &paren.elem,
            _ => break,
        }
    }
    if let Some(error) = error_without_from(inner) {
        let error_text = tidy(error.to_token_stream().to_string());
        let written = tidy(ty.to_token_stream().to_string());
        let ok = written
            .strip_prefix("Result<")
            .and_then(|rest| rest.strip_suffix(&format!(", {error_text}>")))
            .unwrap_or("T");
        return Err(syn::Error::new_spanned(
            error,
            format!(
                "{NEED}; `{error_text}` cannot hold a `LockError` (it has no \
                 `From<LockError>`): return `Result<{ok}, LockError>`, or an error type of \
                 yours with `From<LockError>` (thiserror: `#[error(transparent)] \
                 Lock(#[from] LockError)`), or `anyhow::Error`"
            ),
        ));
    }
    let what = match inner {
        Type::Path(path) if path.qself.is_none() && is_known_non_result(&path.path) => {
            "not a `Result`"
        }
        Type::Path(_) | Type::Macro(_) => return Ok((**ty).clone()),
        Type::Tuple(tuple) if tuple.elems.is_empty() => "the unit type",
        Type::Tuple(_) => "a tuple",
        Type::Reference(_) => "a reference",
        Type::ImplTrait(_) => "an `impl Trait`",
        Type::TraitObject(_) => "a trait object",
        Type::Never(_) => "`!`",
        Type::Array(_) => "an array",
        Type::Slice(_) => "a slice",
        Type::Ptr(_) => "a raw pointer",
        Type::BareFn(_) => "a function pointer",
        _ => "not a `Result`",
    };
    let written = tidy(ty.to_token_stream().to_string());
    let fix = match inner {
        Type::ImplTrait(_) => {
            "return the value itself, as in `-> Result<T, LockError>`".to_string()
        }
        _ => format!("wrap it, as in `-> Result<{written}, LockError>`"),
    };
    Err(syn::Error::new_spanned(
        ty,
        format!("{NEED}; `{written}` is {what}: {fix}"),
    ))
}

/// In `Result<T, E>`, an `E` that certainly has no `From<LockError>`: `String`, `&str`, `()`,
/// a number or `bool`. (rustc would list every `From` impl of `String` instead.)
fn error_without_from(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if path.qself.is_some() || last.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let Some(syn::GenericArgument::Type(error)) = args.args.iter().nth(1) else {
        return None;
    };
    let no_from = match error {
        Type::Reference(reference) => {
            matches!(&*reference.elem, Type::Path(p) if p.path.is_ident("str"))
        }
        Type::Tuple(tuple) => tuple.elems.is_empty(),
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().is_some_and(|s| {
            const NO_FROM: &[&str] = &[
                "String", "bool", "char", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16",
                "i32", "i64", "i128", "isize",
            ];
            s.arguments.is_none() && NO_FROM.iter().any(|name| s.ident == name)
        }),
        _ => false,
    };
    no_from.then_some(error)
}

/// Whether `path` names a standard type that is certainly not a `Result` (`Option<T>`, `u64`,
/// `String`, …). Anything else, such as a `Result` alias, is left to the `LockResult` bound,
/// whose error is precise but comes with follow-on errors from the generated body.
fn is_known_non_result(path: &syn::Path) -> bool {
    const NOT_RESULTS: &[&str] = &[
        "Option", "Vec", "VecDeque", "String", "Box", "Arc", "Rc", "Cow", "Pin", "HashMap",
        "HashSet", "BTreeMap", "BTreeSet", "bool", "char", "str", "u8", "u16", "u32", "u64",
        "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64", "Duration",
    ];
    path.segments
        .last()
        .is_some_and(|segment| NOT_RESULTS.iter().any(|name| segment.ident == name))
}

/// Token text as a person would write it (`Result<u8, E>` rather than `Result < u8 , E >`).
fn tidy(text: String) -> String {
    let mut out = text;
    for (from, to) in [
        (" < ", "<"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        (" :: ", "::"),
        (":: ", "::"),
        ("& ", "&"),
        ("( ", "("),
        (" )", ")"),
        ("' ", "'"),
    ] {
        out = out.replace(from, to);
    }
    out
}

/// A placeholder resolved against the signature.
struct Value {
    /// `user_id`, `req.user.id`, `self.tenant`.
    expr: TokenStream,
    /// For a placeholder that is a whole parameter: its type's span, where a missing
    /// `Display` is reported. `None` for field paths, whose types are not written down;
    /// those are reported on the key.
    type_span: Option<Span>,
}

enum KeyPart {
    Literal(String),
    Value(Value),
}

/// Parses the key template and resolves every placeholder.
fn resolve_key(key: &LitStr, bindings: &Bindings, sig: &Signature) -> syn::Result<Vec<KeyPart>> {
    let span = key.span();
    let text = key.value();
    let template = template::parse(&text)
        .and_then(|template| template::check_separators(&template).map(|()| template))
        .map_err(|message| syn::Error::new(span, message))?;
    check_lookalikes(&text, bindings).map_err(|message| syn::Error::new(span, message))?;
    let mut errors = Errors::default();
    let mut parts = Vec::new();
    for segment in template.segments {
        match segment {
            Segment::Literal(text) => parts.push(KeyPart::Literal(text)),
            Segment::Placeholder(placeholder) => match resolve(&placeholder, bindings, sig, span) {
                Ok(value) => parts.push(KeyPart::Value(value)),
                Err(err) => errors.push(err),
            },
        }
    }
    errors.finish()?;
    Ok(parts)
}

/// Refuses `{user_id}`, `${user_id}`, `#{user_id}` or a leading `#user_id` that names a
/// parameter: written out of habit from `format!`, Spring or lock4j, they are literal text here,
/// and the key would be the same for every call (one global lock), with no error anywhere.
fn check_lookalikes(text: &str, bindings: &Bindings) -> Result<(), String> {
    let names = bindings.names();
    let named: Vec<_> = template::lookalikes(text)
        .into_iter()
        .filter(|l| {
            let root = l.root();
            (root == "self" && bindings.receiver.is_some()) || names.iter().any(|n| n == root)
        })
        .collect();
    let Some(first) = named.first() else {
        return Ok(());
    };
    let mut fixed = String::new();
    let mut at = 0;
    for lookalike in &named {
        fixed.push_str(&text[at..lookalike.range.start]);
        fixed.push('<');
        fixed.push_str(&lookalike.path);
        fixed.push('>');
        at = lookalike.range.end;
    }
    fixed.push_str(&text[at..]);
    let written: Vec<String> = named
        .iter()
        .map(|l| format!("`{}`", &text[l.range.clone()]))
        .collect();
    let (what, is) = match written.as_slice() {
        [one] => (one.clone(), "is literal text, not a placeholder"),
        [init @ .., last] => (
            format!("{} and {last}", init.join(", ")),
            "are literal text, not placeholders",
        ),
        [] => return Ok(()),
    };
    let braces = if named.iter().any(|l| text[l.range.clone()].ends_with('}')) {
        " (for literal braces, write `{{` and `}}`)"
    } else {
        ""
    };
    Err(format!(
        "{what} in the key {is}: every call would lock the same \
         key; placeholders are written `<{}>`, so write `key = \"{fixed}\"`{braces}",
        first.path
    ))
}

fn resolve(
    placeholder: &Placeholder,
    bindings: &Bindings,
    sig: &Signature,
    span: Span,
) -> syn::Result<Value> {
    let written = placeholder.written();
    let fn_name = &sig.ident;
    let (root, root_check_span) = match placeholder.root.as_str() {
        "self" => match &bindings.receiver {
            Some(receiver) => {
                let token = syn::token::SelfValue { span };
                (token.into_token_stream(), receiver.self_token.span)
            }
            None => {
                return Err(syn::Error::new(
                    span,
                    format!(
                        "`{written}` uses `self`, but `{fn_name}` has no `self` receiver; \
                         name one of its parameters instead{}",
                        available(bindings)
                    ),
                ));
            }
        },
        "_" => {
            return Err(syn::Error::new(
                span,
                format!(
                    "`{written}` names `_`, which binds no value; give the parameter a name \
                     (e.g. `id: u64`) and write `<id>`"
                ),
            ));
        }
        name => match bindings.find(name) {
            Some(binding) => {
                let mut ident = binding.ident.clone();
                // A whole parameter is checked on its type; a field path on the key.
                ident.set_span(if placeholder.fields.is_empty() {
                    binding.type_span()
                } else {
                    span
                });
                (ident.into_token_stream(), binding.type_span())
            }
            None => {
                let names = bindings.names();
                let suggestion = suggest::did_you_mean(name, names.iter().map(String::as_str));
                let reason = if suggestion.is_empty() {
                    available(bindings)
                } else {
                    String::new()
                };
                return Err(syn::Error::new(
                    span,
                    format!(
                        "`{written}`: `{fn_name}` has no parameter named `{name}`{suggestion}{reason}"
                    ),
                ));
            }
        },
    };
    let mut members = Vec::new();
    for field in &placeholder.fields {
        members.push(member(field, &written, span)?);
    }
    let expr = quote!(#root #(. #members)*);
    let type_span = members.is_empty().then_some(root_check_span);
    Ok(Value { expr, type_span })
}

/// `; it can use: a, b` or `; it has no parameters to use`.
fn available(bindings: &Bindings) -> String {
    let names = bindings.names();
    if names.is_empty() {
        "; this fn has no parameters to put in the key".to_string()
    } else {
        format!(
            "; the key can use: {}",
            names
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// A field name or tuple index, as tokens spanned on the key.
fn member(field: &str, written: &str, span: Span) -> syn::Result<Member> {
    if field.bytes().all(|b| b.is_ascii_digit()) {
        return match field.parse::<u32>() {
            Ok(index) => Ok(Member::Unnamed(syn::Index { index, span })),
            Err(_) => Err(syn::Error::new(
                span,
                format!("the tuple index `{field}` in `{written}` is too large"),
            )),
        };
    }
    // A keyword such as `type` is written `r#type` in Rust; `self` and friends cannot be fields.
    let ident = syn::parse_str::<Ident>(field)
        .or_else(|_| syn::parse_str::<Ident>(&format!("r#{field}")))
        .map_err(|_| {
            syn::Error::new(
                span,
                format!("`{field}` in `{written}` cannot be a field name"),
            )
        })?;
    let mut ident = ident;
    ident.set_span(span);
    Ok(Member::Named(ident))
}

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

fn generate(func: &ItemFn, args: &Args, ret_ty: &Type, key: &[KeyPart]) -> TokenStream {
    let krate = runtime_path(args.krate.as_ref());
    let private = quote!(#krate::__private);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;

    // Type checks, reported on the user's own tokens (the sqlx trick).
    // The Display check and the key's `.value(…)` take the very same tokens, so rustc reports
    // a missing `Display` once, on the parameter's type, instead of once per use.
    let mut checks = Vec::new();
    for part in key {
        if let KeyPart::Value(Value {
            expr,
            type_span: Some(span),
        }) = part
        {
            checks.push(quote_spanned!(*span=> #private::assert_display(&#expr);));
        }
    }

    let client = match &args.client {
        Some(expr) => {
            let to_client = quote_spanned!(expr.span()=> #private::ClientRef::to_client(&(#expr)));
            quote!(::core::result::Result::Ok::<#private::LockClient, #private::LockError>(#to_client))
        }
        None => quote!(#private::default_client()),
    };

    let key_parts = key.iter().map(|part| match part {
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
    // The template, not the rendered key, labels the exported metrics.
    if let Some(key) = &args.key {
        let template = key.value();
        options.extend(quote!(.metrics_label(#template)));
    }

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

    // The body's statements, not its block: a block as the async block's tail would draw
    // `unused_braces` on every one-line body, and the fix the lint suggests breaks the code.
    let stmts = &block.stmts;
    let body = quote! {
        move |__rlock_fence: u64| async move {
            #fake_return
            #fence
            #(#stmts)*
        }
    };
    // The return type's one requirement (`LockResult`) is named here, on the return type's own
    // tokens: a function that cannot return a lock error gets one error, on its return type.
    let outcome = quote_spanned!(ret_ty.span()=> <#ret_ty as #private::LockResult>::OUTCOME);

    quote! {
        #(#attrs)*
        #vis #sig {
            #[allow(unreachable_code, clippy::unit_arg)]
            if false {
                #(#checks)*
            }
            let __rlock_client = #client;
            let __rlock_key = #private::KeyBuilder::new() #(#key_parts)* .finish();
            let __rlock_options = #options;
            #private::run_locked(
                __rlock_client,
                __rlock_key,
                __rlock_options,
                #outcome,
                #body,
            )
            .await
        }
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
            ":: rt :: __private :: assert_display (& user_id)",
            "< Result < u64 , AppError > as :: rt :: __private :: LockResult > :: OUTCOME",
            "move | __rlock_fence : u64 | async move",
            "let __rlock_return : Result < u64 , AppError > = loop { } ;",
            // The body's statements, without their block's braces.
            "return __rlock_return ; } Ok (user_id) } ,",
        ] {
            assert!(out.contains(needle), "missing {needle:?} in\n{out}");
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
            assert!(out.contains(needle), "missing {needle:?} in\n{out}");
        }
        // Fields' types are not written down, so there is no Display assertion for them.
        assert!(!out.contains("assert_display"), "{out}");
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
    fn independent_errors_are_all_reported() {
        let out = error_of(r#"key = "<nope>""#, "fn f() { }");
        assert!(out.contains("needs an `async fn`"), "{out}");
        assert!(out.contains("add a return type"), "{out}");
        assert!(out.contains("no parameter named `nope`"), "{out}");
    }

    #[test]
    fn tidy_prints_types_as_written() {
        assert_eq!(
            tidy("Result < Vec < u8 > , E >".into()),
            "Result<Vec<u8>, E>"
        );
        assert_eq!(tidy("& 'static str".into()), "&'static str");
    }
}
