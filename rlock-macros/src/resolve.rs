//! The key template resolved against the signature: every placeholder becomes an
//! expression on a parameter (or `self`), spanned where rustc should report it.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Ident, LitStr, Member, Signature};

use crate::errors::Errors;
use crate::signature::Bindings;
use crate::suggest;
use crate::template::{self, Placeholder, Segment};

/// A placeholder resolved against the signature.
pub(crate) struct Value {
    /// `user_id`, `req.user.id`, `self.tenant`.
    pub(crate) expr: TokenStream,
    /// For a placeholder that is a whole parameter: its type's span, where a missing
    /// `Display` is reported. `None` for field paths, whose types are not written down;
    /// those are reported on the key.
    pub(crate) type_span: Option<Span>,
}

pub(crate) enum KeyPart {
    Literal(String),
    Value(Value),
}

/// Parses the key template and resolves every placeholder.
pub(crate) fn resolve_key(
    key: &LitStr,
    bindings: &Bindings,
    sig: &Signature,
) -> syn::Result<Vec<KeyPart>> {
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
