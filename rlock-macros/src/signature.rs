//! The names a function signature binds, for checking placeholders against.
//!
//! Like tracing-attributes' `param_names`, this walks the parameter patterns, so a name bound
//! inside a pattern (`Path(user_id): Path<u64>`, `State(AppState { locks, .. }): State<_>`) is
//! as usable as a plain parameter.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, Signature, Type};

/// A name bound by the signature.
#[derive(Clone)]
pub(crate) struct Binding {
    pub(crate) ident: Ident,
    /// The parameter's type when the binding is the whole parameter (`user_id: u64`); `None`
    /// when it is bound inside a pattern and its type is not written down.
    pub(crate) ty: Option<Type>,
}

impl Binding {
    /// The name without a raw prefix (`r#type` → `type`), as placeholders write it.
    pub(crate) fn name(&self) -> String {
        syn::ext::IdentExt::unraw(&self.ident).to_string()
    }

    /// Where a type error about this binding's value is reported: its type when written,
    /// otherwise the name in the pattern.
    pub(crate) fn type_span(&self) -> Span {
        match &self.ty {
            Some(ty) => ty.span(),
            None => self.ident.span(),
        }
    }
}

/// Everything a placeholder may refer to.
#[derive(Clone, Default)]
pub(crate) struct Bindings {
    /// The `self` receiver, when there is one.
    pub(crate) receiver: Option<syn::Receiver>,
    pub(crate) names: Vec<Binding>,
    /// Whether some parameter is ignored with `_`.
    pub(crate) has_wildcard: bool,
}

impl Bindings {
    pub(crate) fn of(sig: &Signature) -> Self {
        let mut bindings = Bindings::default();
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => bindings.receiver = Some(receiver.clone()),
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) if pat.subpat.is_none() => bindings.names.push(Binding {
                        ident: pat.ident.clone(),
                        ty: Some((*typed.ty).clone()),
                    }),
                    pat => bindings.walk(pat),
                },
            }
        }
        bindings
    }

    fn walk(&mut self, pat: &Pat) {
        match pat {
            Pat::Ident(pat) => {
                self.names.push(Binding {
                    ident: pat.ident.clone(),
                    ty: None,
                });
                if let Some((_, sub)) = &pat.subpat {
                    self.walk(sub);
                }
            }
            Pat::Struct(pat) => pat.fields.iter().for_each(|field| self.walk(&field.pat)),
            Pat::TupleStruct(pat) => pat.elems.iter().for_each(|elem| self.walk(elem)),
            Pat::Tuple(pat) => pat.elems.iter().for_each(|elem| self.walk(elem)),
            Pat::Slice(pat) => pat.elems.iter().for_each(|elem| self.walk(elem)),
            Pat::Reference(pat) => self.walk(&pat.pat),
            Pat::Paren(pat) => self.walk(&pat.pat),
            Pat::Type(pat) => self.walk(&pat.pat),
            // Every alternative binds the same names; the first one is enough.
            Pat::Or(pat) => {
                if let Some(first) = pat.cases.first() {
                    self.walk(first);
                }
            }
            Pat::Wild(_) => self.has_wildcard = true,
            _ => {}
        }
    }

    /// The binding a placeholder root names.
    pub(crate) fn find(&self, name: &str) -> Option<&Binding> {
        self.names.iter().find(|binding| binding.name() == name)
    }

    /// All names, for suggestions.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.names.iter().map(Binding::name).collect();
        if self.receiver.is_some() {
            names.push("self".into());
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sig: &str) -> Vec<String> {
        let sig: Signature = syn::parse_str(sig).expect("test signature parses");
        Bindings::of(&sig).names()
    }

    #[test]
    fn plain_and_pattern_bound_names() {
        assert_eq!(
            names("fn f(a: u64, mut b: String, ref c: u8)"),
            ["a", "b", "c"]
        );
        assert_eq!(
            names("fn f(Path(user_id): Path<u64>, State(state): State<App>)"),
            ["user_id", "state"]
        );
        assert_eq!(
            names("fn f((x, (y, _)): (u8, (u8, u8)), Point { x: px, y: py }: Point)"),
            ["x", "y", "px", "py"]
        );
        assert_eq!(
            names("fn f(&self, [first, ..]: [u8; 4])"),
            ["first", "self"]
        );
        assert_eq!(names("fn f(all @ Wrap(inner): Wrap)"), ["all", "inner"]);
        assert_eq!(names("fn f(r#type: u8)"), ["type"]);
    }

    #[test]
    fn whole_parameters_keep_their_type() {
        let sig: Signature =
            syn::parse_str("fn f(a: u64, Path(b): Path<u64>, _: u8)").expect("parses");
        let bindings = Bindings::of(&sig);
        assert!(bindings.find("a").is_some_and(|b| b.ty.is_some()));
        assert!(bindings.find("b").is_some_and(|b| b.ty.is_none()));
        assert!(bindings.has_wildcard);
    }
}
