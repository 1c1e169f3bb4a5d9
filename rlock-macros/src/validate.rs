//! Checks of the annotated function's signature: an `async fn` returning a `Result` whose
//! error can hold a `LockError`.

use quote::ToTokens;

use crate::attribute::Attribute;
use syn::{ReturnType, Signature, Type};

/// The lock is taken before the body and released after it: only an `async fn` has both.
pub(crate) fn check_async(sig: &Signature, attribute: Attribute) -> syn::Result<()> {
    if sig.asyncness.is_some() {
        return Ok(());
    }
    Err(syn::Error::new(
        sig.fn_token.span,
        format!(
            "{} needs an `async fn`: {} is held across the body's awaits and released when \
             it finishes; write `async fn {}(…)`",
            attribute.name(),
            attribute.held(),
            sig.ident
        ),
    ))
}

/// The declared return type, if it can be a `Result`.
///
/// Only the shape is checked here: a path type (`Result<T, E>`, `io::Result<T>`, an alias)
/// is accepted and then checked by the `LockResult` bound in the generated code.
pub(crate) fn return_type(sig: &Signature, attribute: Attribute) -> syn::Result<Type> {
    let need = format!(
        "{} needs the fn to return `Result<T, E>` with `E: From<LockError>`, so that failing \
         to acquire {} can be returned",
        attribute.name(),
        attribute.held()
    );
    let ty = match &sig.output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.paren_token.span.close(),
                format!("{need}; add a return type, as in `-> Result<(), LockError>`"),
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
                "{need}; `{error_text}` cannot hold a `LockError` (it has no \
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
        Type::FnPtr(_) => "a function pointer",
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
        format!("{need}; `{written}` is {what}: {fix}"),
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

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn tidy_prints_types_as_written() {
        assert_eq!(
            tidy("Result < Vec < u8 > , E >".into()),
            "Result<Vec<u8>, E>"
        );
        assert_eq!(tidy("& 'static str".into()), "&'static str");
    }
}
