//! The duration grammar as source code for `rlock-runtime`, which parses its environment
//! variables with it.
//!
//! A proc-macro crate cannot export functions, the runtime must not be a dependency of this
//! crate, and a file outside a crate's directory is not packaged with it. So the hidden
//! `__duration_grammar!` expands to the items of `duration.rs` itself, read with
//! `include_str!`: the attribute and the runtime compile the very same parser, and a change
//! to the grammar reaches both.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, Item};

/// The grammar's source, the file the attribute compiles as its `duration` module.
const SOURCE: &str = include_str!("duration.rs");

/// `__duration_grammar!()` → the items of `duration.rs`, without its module docs (inner
/// attributes are not allowed where a macro expands) and without its tests (they are this
/// crate's).
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    if !input.is_empty() {
        return quote!(::core::compile_error!("`__duration_grammar!` takes no arguments"););
    }
    let file = match syn::parse_file(SOURCE) {
        Ok(file) => file,
        Err(err) => return err.to_compile_error(),
    };
    let items = file.items.into_iter().filter(|item| match item {
        Item::Mod(module) => !is_test_only(&module.attrs),
        _ => true,
    });
    quote!(#(#items)*)
}

fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_is_emitted_without_its_docs_and_tests() {
        let out = expand(TokenStream::new()).to_string();
        assert!(out.contains("pub (crate) fn parse (text : & str)"), "{out}");
        assert!(out.contains("pub (crate) struct Millis"), "{out}");
        assert!(!out.contains("# !"), "{out}");
        assert!(!out.contains("mod tests"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        assert!(expand(quote!(x)).to_string().contains("compile_error"));
    }

    /// The marker before the child's verdict in its output.
    const VERDICT: &str = "runtime verdict: ";

    /// What `rlock-runtime` makes of `RLOCK_DEFAULT_TTL=text`: `Ok`, or its error message. This
    /// test binary runs `the_runtime_reads_rlock_default_ttl` in a child given that variable,
    /// since a test must not change its own process's environment.
    fn runtime_verdict(text: &str) -> Result<(), String> {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = std::process::Command::new(exe);
        child
            .args([
                "--exact",
                "grammar::tests::the_runtime_reads_rlock_default_ttl",
                "--ignored",
                "--nocapture",
            ])
            .env("REDIS_URL", "redis://127.0.0.1:6379/")
            .env("RLOCK_DEFAULT_TTL", text);
        for other in [
            "RLOCK_URL",
            "RLOCK_NAMESPACE",
            "RLOCK_DEFAULT_WAIT",
            "RLOCK_ON_LOST",
            "RLOCK_COMMAND_TIMEOUT",
            "RLOCK_MIN_REPLICAS",
        ] {
            child.env_remove(other);
        }
        let output = child.output().expect("run the test binary");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let verdict = stdout
            .lines()
            .find_map(|line| line.strip_prefix(VERDICT))
            .unwrap_or_else(|| panic!("no verdict for {text:?}:\n{stdout}"));
        match verdict {
            "accepted" => Ok(()),
            refused => Err(refused.to_string()),
        }
    }

    #[test]
    #[ignore = "run by durations_mean_the_same_to_the_attribute_and_the_environment, which sets its environment"]
    fn the_runtime_reads_rlock_default_ttl() {
        match rlock_runtime::LockClientBuilder::from_env() {
            Ok(_) => println!("{VERDICT}accepted"),
            Err(err) => println!("{VERDICT}{err}"),
        }
    }

    /// The attribute and `LockClient::from_env` accept the same durations, and refuse the
    /// others with the same explanation (the runtime's names the variable first).
    #[test]
    fn durations_mean_the_same_to_the_attribute_and_the_environment() {
        // (The environment also trims surrounding whitespace and reads an empty variable as
        // unset, as it does for every variable; those cases are left out.)
        for text in [
            "500ms",
            "10s",
            "1m30s",
            "2h",
            "1h2m3s4ms",
            "0s",
            "90m",
            "30s1m",
            "1s1s",
            "1ms1s",
            "10",
            "10 s",
            "1.5s",
            "1,5s",
            "-1s",
            "+1s",
            "2d",
            "5sec",
            "10us",
            "s",
            "1s5",
            "10s!",
            "99999999999999999999s",
        ] {
            match (crate::duration::parse(text), runtime_verdict(text)) {
                (Ok(_), Ok(())) => {}
                (Err(attribute), Err(runtime)) => assert_eq!(
                    runtime,
                    format!(
                        "invalid lock client configuration: RLOCK_DEFAULT_TTL=`{text}`: {attribute}"
                    ),
                ),
                (attribute, runtime) => {
                    panic!("{text:?}: the attribute says {attribute:?}, the runtime {runtime:?}")
                }
            }
        }
    }
}
