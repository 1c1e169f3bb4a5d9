//! The error accumulator every check shares, so that one build reports every independent
//! mistake at once.

/// Collects independent errors so that several mistakes are reported in one build.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    /// The value of `result`, or `None` with its error kept.
    pub(crate) fn keep<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|err| self.push(err)).ok()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}
