//! The annotated function as the attribute reads it: attributes, visibility and signature
//! parsed, the body kept as tokens.
//!
//! As in tokio-macros' `entry.rs`, the body is never parsed here. The attribute only moves it
//! into the generated code, where rustc parses it once: a syntax error in the body is then
//! rustc's alone, on the user's tokens, instead of also failing this parse and drawing a
//! second, wrong error about what the attribute applies to.

use proc_macro2::TokenStream;
use quote::ToTokens as _;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Signature, Token, Visibility, braced, token};

/// An `async fn` (or what should be one) with a body.
pub(crate) struct LockedFn {
    /// The attributes written before the function.
    pub(crate) attrs: Vec<Attribute>,
    /// The body's inner attributes (`#![allow(…)]`), written as outer ones (`#[allow(…)]`):
    /// the body becomes an async block, which cannot carry inner attributes, and on the
    /// function they mean the same. Kept as tokens, since the body's grammar is rustc's to
    /// check.
    pub(crate) inner_attrs: TokenStream,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// The body's tokens after its inner attributes, without its braces.
    pub(crate) body: TokenStream,
}

impl Parse for LockedFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let content;
        braced!(content in input);
        let mut inner_attrs = TokenStream::new();
        while content.peek(Token![#]) && content.peek2(Token![!]) && content.peek3(token::Bracket) {
            let pound: Token![#] = content.parse()?;
            content.parse::<Token![!]>()?;
            let attribute: proc_macro2::TokenTree = content.parse()?;
            pound.to_tokens(&mut inner_attrs);
            attribute.to_tokens(&mut inner_attrs);
        }
        let body = content.parse()?;
        Ok(LockedFn {
            attrs,
            vis,
            sig,
            inner_attrs,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(item: &str) -> syn::Result<LockedFn> {
        syn::parse_str(item)
    }

    #[test]
    fn the_body_is_kept_as_written_even_when_it_does_not_parse() {
        let func =
            parse("/// Docs.\npub async fn f(a: u8) -> Result<(), E> { let x = a + ; Ok(()) }")
                .expect("the signature parses");
        assert_eq!(func.attrs.len(), 1);
        assert_eq!(func.sig.ident, "f");
        assert_eq!(func.body.to_string(), "let x = a + ; Ok (())");
    }

    #[test]
    fn inner_attributes_become_outer_ones() {
        let func = parse("async fn f() -> R { #![allow(unused)] #![doc = \"x\"] let _y = 1; }")
            .expect("parses");
        assert_eq!(
            func.inner_attrs.to_string(),
            "# [allow (unused)] # [doc = \"x\"]"
        );
        assert_eq!(func.body.to_string(), "let _y = 1 ;");
    }

    #[test]
    fn items_without_a_body_are_refused() {
        for item in [
            "struct S;",
            "async fn f() -> R;",
            "async fn f() -> R { } extra",
        ] {
            assert!(parse(item).is_err(), "{item}");
        }
    }
}
