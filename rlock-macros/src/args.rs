//! Parsing and validation of the attribute's options.
//!
//! Parsing (`impl Parse for Args`) reads `name = value` pairs, rejects repeats and unknown
//! names, and turns durations into milliseconds. [`Args::check_combination`] then checks what only makes
//! sense as a whole (a `key` is given, `max_hold` is not shorter than `ttl`, …).

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Expr, Ident, Lit, LitBool, LitInt, LitStr, Path, Token};

use crate::attribute::Attribute;
use crate::duration::{self, Millis};
use crate::errors::Errors;
use crate::limits::{MAX_HOLD, MAX_PERMITS, MAX_REPLICAS, MAX_TAKE, MAX_TTL, MAX_WAIT, MIN_TTL};
use crate::suggest;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(renew);
    syn::custom_keyword!(max_hold);
    syn::custom_keyword!(min_hold);
    syn::custom_keyword!(on_lost);
    syn::custom_keyword!(fence);
    syn::custom_keyword!(client);
    syn::custom_keyword!(min_replicas);
    syn::custom_keyword!(fair);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(take);
}

/// Every option, in the order the docs list them.
pub(crate) const OPTIONS: &[&str] = &[
    "key",
    "ttl",
    "wait",
    "renew",
    "max_hold",
    "min_hold",
    "on_lost",
    "fence",
    "min_replicas",
    "fair",
    "keys",
    "permits",
    "take",
    "client",
    "crate",
];

/// A duration option with the span of its literal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DurationArg {
    pub(crate) value: Millis,
    pub(crate) span: Span,
}

/// `on_lost = "…"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    Abort,
    Continue,
}

/// The options as written, each at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<LitStr>,
    /// `keys = ["…", …]`: several locks taken together, with the list's span.
    pub(crate) keys: Option<(Vec<LitStr>, Span)>,
    pub(crate) ttl: Option<DurationArg>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) renew: Option<LitBool>,
    pub(crate) max_hold: Option<DurationArg>,
    pub(crate) min_hold: Option<DurationArg>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) fence: Option<Ident>,
    pub(crate) min_replicas: Option<u32>,
    pub(crate) fair: Option<LitBool>,
    /// `#[semaphore]`'s count, with its span.
    pub(crate) permits: Option<(u32, Span)>,
    /// `#[semaphore]`'s permits per call, with its span.
    pub(crate) take: Option<(u32, Span)>,
    pub(crate) client: Option<Expr>,
    pub(crate) krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "the key must be named: write `key = \"{}\"`",
                    lit.value().escape_debug()
                ),
            ));
        }
        // Every unknown option is reported, not only the first.
        let mut unknown = Errors::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::keys) {
                let name = input.parse::<kw::keys>()?;
                let value = keys_value(input, name.span)?;
                set(&mut args.keys, value, "keys", name.span)?;
            } else if lookahead.peek(kw::key) {
                let name = input.parse::<kw::key>()?;
                let value = string_value(input, "key", "key = \"order:<user_id>\"", name.span)?;
                set(&mut args.key, value, "key", name.span)?;
            } else if lookahead.peek(kw::ttl) {
                let name = input.parse::<kw::ttl>()?;
                let value = duration_value(input, "ttl", name.span)?;
                check_range(value, "ttl", MIN_TTL, MAX_TTL)?;
                set(&mut args.ttl, value, "ttl", name.span)?;
            } else if lookahead.peek(kw::wait) {
                let name = input.parse::<kw::wait>()?;
                let value = duration_value(input, "wait", name.span)?;
                check_range(value, "wait", Millis(0), MAX_WAIT)?;
                set(&mut args.wait, value, "wait", name.span)?;
            } else if lookahead.peek(kw::renew) {
                let name = input.parse::<kw::renew>()?;
                let value = bool_value(input, "renew", name.span)?;
                set(&mut args.renew, value, "renew", name.span)?;
            } else if lookahead.peek(kw::max_hold) {
                let name = input.parse::<kw::max_hold>()?;
                let value = duration_value(input, "max_hold", name.span)?;
                check_range(value, "max_hold", Millis(1), MAX_HOLD)?;
                set(&mut args.max_hold, value, "max_hold", name.span)?;
            } else if lookahead.peek(kw::min_hold) {
                let name = input.parse::<kw::min_hold>()?;
                let value = duration_value(input, "min_hold", name.span)?;
                check_range(value, "min_hold", Millis(1), MAX_TTL)?;
                set(&mut args.min_hold, value, "min_hold", name.span)?;
            } else if lookahead.peek(kw::on_lost) {
                let name = input.parse::<kw::on_lost>()?;
                let value = on_lost_value(input, name.span)?;
                set(&mut args.on_lost, value, "on_lost", name.span)?;
            } else if lookahead.peek(kw::fence) {
                let name = input.parse::<kw::fence>()?;
                let value = fence_value(input, name.span)?;
                set(&mut args.fence, value, "fence", name.span)?;
            } else if lookahead.peek(kw::min_replicas) {
                let name = input.parse::<kw::min_replicas>()?;
                let value = replicas_value(input, name.span)?;
                set(&mut args.min_replicas, value, "min_replicas", name.span)?;
            } else if lookahead.peek(kw::fair) {
                let name = input.parse::<kw::fair>()?;
                let value = bool_value(input, "fair", name.span)?;
                set(&mut args.fair, value, "fair", name.span)?;
            } else if lookahead.peek(kw::permits) {
                let name = input.parse::<kw::permits>()?;
                let value = permits_value(input, name.span)?;
                set(&mut args.permits, value, "permits", name.span)?;
            } else if lookahead.peek(kw::take) {
                let name = input.parse::<kw::take>()?;
                let value = take_value(input, name.span)?;
                set(&mut args.take, value, "take", name.span)?;
            } else if lookahead.peek(kw::client) {
                let name = input.parse::<kw::client>()?;
                let value = client_value(input, name.span)?;
                set(&mut args.client, value, "client", name.span)?;
            } else if lookahead.peek(Token![crate]) {
                let name = input.parse::<Token![crate]>()?;
                let value = crate_value(input, name.span)?;
                set(&mut args.krate, value, "crate", name.span)?;
            } else if input.peek(Ident::peek_any) {
                // Reported with every other unknown option once all are read.
                let name = input.call(Ident::parse_any)?;
                unknown.push(unknown_option(&name));
                if input.peek(Token![=]) {
                    input.parse::<Token![=]>()?;
                    input.parse::<Expr>()?;
                }
            } else {
                return Err(syn::Error::new(
                    input.span(),
                    format!(
                        "expected an option such as `key = \"order:<user_id>\"`; \
                         expected one of: {}",
                        OPTIONS.join(", ")
                    ),
                ));
            }
            if input.is_empty() {
                break;
            }
            if !input.peek(Token![,]) {
                return Err(syn::Error::new(
                    input.span(),
                    "expected `,` between options, as in `key = \"order:<id>\", ttl = \"10s\"`",
                ));
            }
            input.parse::<Token![,]>()?;
        }
        unknown.finish()?;
        Ok(args)
    }
}

/// What other lock libraries call an option: Redisson's `leaseTime`/`waitTime`, lock4j's
/// `expire`/`acquireTimeout`/`keys`, and the usual synonyms.
const FOREIGN_NAMES: &[(&str, &str)] = &[
    ("lease_time", "ttl"),
    ("leasetime", "ttl"),
    ("lease", "ttl"),
    ("expire", "ttl"),
    ("expire_time", "ttl"),
    ("expiration", "ttl"),
    ("expiry", "ttl"),
    ("timeout_ms", "ttl"),
    ("wait_time", "wait"),
    ("waittime", "wait"),
    ("acquire_timeout", "wait"),
    ("acquiretimeout", "wait"),
    ("timeout", "wait"),
    ("wait_timeout", "wait"),
    // ShedLock's `lockAtMostFor` is the lease a dead node's lock lasts; `lockAtLeastFor`
    // keeps the key after the job.
    ("lock_at_most_for", "ttl"),
    ("lockatmostfor", "ttl"),
    ("lock_at_least_for", "min_hold"),
    ("lockatleastfor", "min_hold"),
    ("name", "key"),
    ("value", "key"),
];

/// The error for an option rlock does not have, with the one it probably means.
fn unknown_option(name: &Ident) -> syn::Error {
    let written = name.unraw().to_string();
    let lower = written.to_lowercase();
    let suggestion = match FOREIGN_NAMES.iter().find(|(foreign, _)| *foreign == lower) {
        Some((_, ours)) => format!(
            "; rlock calls it `{ours}`, as in `{ours} = {}`;",
            match *ours {
                "ttl" => "\"10s\"",
                "wait" => "\"2s\"",
                "min_hold" => "\"30s\"",
                _ => "\"order:<user_id>\"",
            }
        ),
        None => suggest::did_you_mean(&written, OPTIONS.iter().copied()),
    };
    syn::Error::new(
        name.span(),
        format!(
            "unknown option `{written}`{} expected one of: {}",
            then(suggestion),
            OPTIONS.join(", ")
        ),
    )
}

/// Joins a "did you mean" suggestion and the sentence after it.
fn then(suggestion: String) -> String {
    if suggestion.is_empty() {
        ";".to_string()
    } else {
        suggestion
    }
}

/// Stores `value` in `slot` unless the option was given before.
fn set<T>(slot: &mut Option<T>, value: T, name: &str, span: Span) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            span,
            format!("expected only a single `{name}` argument; remove the repeated one"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// Parses the `=` after an option name, with a message that shows the whole form.
fn equals(input: ParseStream<'_>, name: &str, example: &str, span: Span) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        Ok(())
    } else {
        Err(syn::Error::new(
            span,
            format!("expected `=` after `{name}`; write `{example}`"),
        ))
    }
}

/// The value's span and a text for messages, consuming it; used to report a value of the
/// wrong kind.
fn bad_value(input: ParseStream<'_>) -> syn::Result<Expr> {
    if input.is_empty() || input.peek(Token![,]) {
        return Err(syn::Error::new(input.span(), "expected a value after `=`"));
    }
    input.parse::<Expr>()
}

fn string_value(
    input: ParseStream<'_>,
    name: &str,
    example: &str,
    span: Span,
) -> syn::Result<LitStr> {
    equals(input, name, example, span)?;
    if input.peek(LitStr) {
        return input.parse();
    }
    let value = bad_value(input)?;
    Err(syn::Error::new(
        value.span(),
        format!("`{name}` must be a string literal, as in `{example}`"),
    ))
}

/// `keys = ["a:<x>", "b:<y>"]`: a non-empty list of distinct string templates.
fn keys_value(input: ParseStream<'_>, span: Span) -> syn::Result<(Vec<LitStr>, Span)> {
    const EXAMPLE: &str = "keys = [\"account:<from>\", \"account:<to>\"]";
    equals(input, "keys", EXAMPLE, span)?;
    let value = bad_value(input)?;
    let Expr::Array(list) = &value else {
        return Err(syn::Error::new(
            value.span(),
            format!("`keys` must be a list of key templates in brackets, as in `{EXAMPLE}`"),
        ));
    };
    let mut templates: Vec<LitStr> = Vec::new();
    for element in &list.elems {
        let Expr::Lit(syn::ExprLit {
            lit: Lit::Str(template),
            ..
        }) = element
        else {
            return Err(syn::Error::new(
                element.span(),
                "each of `keys` must be a string literal, such as \"account:<from>\"",
            ));
        };
        if templates.iter().any(|t| t.value() == template.value()) {
            return Err(syn::Error::new(
                template.span(),
                format!(
                    "`keys` names \"{}\" twice; name each key once",
                    template.value().escape_debug()
                ),
            ));
        }
        templates.push(template.clone());
    }
    if templates.is_empty() {
        return Err(syn::Error::new(
            list.span(),
            format!("`keys` needs at least one key template, as in `{EXAMPLE}`"),
        ));
    }
    Ok((templates, list.span()))
}

fn duration_value(input: ParseStream<'_>, name: &str, span: Span) -> syn::Result<DurationArg> {
    let example = format!("{name} = \"10s\"");
    equals(input, name, &example, span)?;
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return match duration::parse(&lit.value()) {
            Ok(value) => Ok(DurationArg {
                value,
                span: lit.span(),
            }),
            Err(message) => Err(syn::Error::new(
                lit.span(),
                format!("invalid `{name}`: {message}"),
            )),
        };
    }
    let value = bad_value(input)?;
    // `ttl = 10s` lexes as the integer 10 with suffix `s`: show the quoted form.
    let quoted = match &value {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Int(int) if int.suffix().is_empty() => Some(format!("{}s", int.base10_digits())),
            Lit::Int(int) => Some(int.to_string()),
            _ => None,
        },
        _ => None,
    };
    let message = match quoted {
        Some(text) => format!("`{name}` must be a string literal: write `{name} = \"{text}\"`"),
        None => format!(
            "`{name}` must be a string literal such as `{example}`; durations are checked \
             at compile time, so they cannot come from an expression"
        ),
    };
    Err(syn::Error::new(value.span(), message))
}

fn check_range(arg: DurationArg, name: &str, min: Millis, max: Millis) -> syn::Result<()> {
    let value = arg.value;
    let message = if value.0 == 0 && min.0 > 0 {
        match name {
            "ttl" => "`ttl` may not be 0: the lease would end before the body starts; \
                      give it a lease such as `ttl = \"10s\"`"
                .to_string(),
            "min_hold" => "`min_hold` may not be 0: it would keep the key for no time; remove \
                           `min_hold` for an ordinary lock, or give it a length such as \
                           `min_hold = \"30s\"`"
                .to_string(),
            _ => format!(
                "`{name}` may not be 0: nothing could ever be held; remove `{name}` for no cap, \
                 or give it a length such as `{name} = \"5m\"`"
            ),
        }
    } else if value < min {
        format!(
            "`{name}` = `{value}` is too short; it must be at least `{min}`, since the lease is \
             renewed every ttl/3 and a network round trip can take longer than that"
        )
    } else if value > max {
        format!(
            "`{name}` = `{value}` is too long; it may be at most `{max}` ({}). {}",
            match name {
                "max_hold" => "7 days",
                _ => "24 hours",
            },
            match name {
                "ttl" => "For long work keep a short `ttl` and let renewal extend it",
                "wait" => "A caller waiting this long is better served by a queue",
                "min_hold" =>
                    "A job kept from running again for longer is better kept by its \
                               scheduler",
                _ => "Hold a lock for less than a week, or manage it by hand",
            }
        )
    } else {
        return Ok(());
    };
    Err(syn::Error::new(arg.span, message))
}

fn bool_value(input: ParseStream<'_>, name: &str, span: Span) -> syn::Result<LitBool> {
    equals(input, name, &format!("{name} = true"), span)?;
    if input.peek(LitBool) {
        return input.parse();
    }
    let value = bad_value(input)?;
    let hint = match &value {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(text) if text.value() == "true" || text.value() == "false" => {
                format!("; write it without quotes: `{name} = {}`", text.value())
            }
            _ => String::new(),
        },
        _ => String::new(),
    };
    Err(syn::Error::new(
        value.span(),
        format!("`{name}` must be `true` or `false`{hint}"),
    ))
}

fn on_lost_value(input: ParseStream<'_>, span: Span) -> syn::Result<OnLost> {
    const EXPECTED: &str = "expected one of: abort, continue";
    equals(input, "on_lost", "on_lost = \"abort\"", span)?;
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        let text = lit.value();
        return match text.as_str() {
            "abort" => Ok(OnLost::Abort),
            "continue" => Ok(OnLost::Continue),
            _ => Err(syn::Error::new(
                lit.span(),
                format!(
                    "unknown `on_lost` value `{}`{} {EXPECTED} (`abort` drops the body and \
                     returns `LockError::Lost`, `continue` lets the body finish)",
                    text.escape_debug(),
                    then(suggest::did_you_mean(&text, ["abort", "continue"]))
                ),
            )),
        };
    }
    let value = bad_value(input)?;
    let hint = match &value {
        Expr::Path(path) if path.path.is_ident("abort") => "; write `on_lost = \"abort\"`",
        Expr::Continue(_) => "; write `on_lost = \"continue\"`",
        _ => "",
    };
    Err(syn::Error::new(
        value.span(),
        format!("`on_lost` must be a string literal{hint}; {EXPECTED}"),
    ))
}

fn replicas_value(input: ParseStream<'_>, span: Span) -> syn::Result<u32> {
    equals(input, "min_replicas", "min_replicas = 1", span)?;
    let expected = format!(
        "`min_replicas` must be a whole number from 0 to {MAX_REPLICAS}, such as `min_replicas = 1`"
    );
    if input.peek(LitInt) {
        let lit: LitInt = input.parse()?;
        return match lit.base10_parse::<u32>() {
            Ok(n) if n <= MAX_REPLICAS && lit.suffix().is_empty() => Ok(n),
            _ => Err(syn::Error::new(lit.span(), expected)),
        };
    }
    let value = bad_value(input)?;
    let hint = match &value {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(text) if text.value().parse::<u32>().is_ok() => {
                format!(
                    "; write it without quotes: `min_replicas = {}`",
                    text.value()
                )
            }
            _ => String::new(),
        },
        _ => String::new(),
    };
    Err(syn::Error::new(value.span(), format!("{expected}{hint}")))
}

fn permits_value(input: ParseStream<'_>, span: Span) -> syn::Result<(u32, Span)> {
    equals(input, "permits", "permits = 5", span)?;
    let expected = format!(
        "`permits` must be a whole number from 1 to {MAX_PERMITS}, such as `permits = 5`: how \
         many may hold the semaphore at once"
    );
    count_value(input, "permits", MAX_PERMITS, expected)
}

fn take_value(input: ParseStream<'_>, span: Span) -> syn::Result<(u32, Span)> {
    equals(input, "take", "take = 3", span)?;
    let expected = format!(
        "`take` must be a whole number from 1 to {MAX_TAKE}, such as `take = 3`: how many of \
         the semaphore's permits one call holds at once"
    );
    count_value(input, "take", MAX_TAKE, expected)
}

/// A whole number from 1 to `most` for option `name`, or `expected` with a hint.
fn count_value(
    input: ParseStream<'_>,
    name: &str,
    most: u32,
    expected: String,
) -> syn::Result<(u32, Span)> {
    if input.peek(LitInt) {
        let lit: LitInt = input.parse()?;
        return match lit.base10_parse::<u32>() {
            Ok(n) if (1..=most).contains(&n) && lit.suffix().is_empty() => Ok((n, lit.span())),
            _ => Err(syn::Error::new(lit.span(), expected)),
        };
    }
    let value = bad_value(input)?;
    let hint = match &value {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(text) if text.value().parse::<u32>().is_ok() => {
                format!("; write it without quotes: `{name} = {}`", text.value())
            }
            _ => String::new(),
        },
        _ => "; the count is checked at compile time, so it cannot come from an expression"
            .to_string(),
    };
    Err(syn::Error::new(value.span(), format!("{expected}{hint}")))
}

fn fence_value(input: ParseStream<'_>, span: Span) -> syn::Result<Ident> {
    equals(input, "fence", "fence = token", span)?;
    if input.peek(Ident) {
        let ident: Ident = input.parse()?;
        if !(input.is_empty() || input.peek(Token![,])) {
            return Err(syn::Error::new(
                ident.span(),
                "`fence` must be a plain identifier, such as `fence = token`",
            ));
        }
        return Ok(ident);
    }
    let what = if input.peek(Token![_]) {
        "`_` binds nothing; name the local, as in `fence = token`, or remove `fence`"
    } else if input.peek(Ident::peek_any) {
        "a keyword cannot name the local; pick another name, as in `fence = token`"
    } else if input.peek(LitStr) {
        "write the name without quotes, as in `fence = token`"
    } else {
        "name the local that receives the fencing token (a `u64`), as in `fence = token`"
    };
    let value = if input.peek(Token![_]) {
        let underscore: Token![_] = input.parse()?;
        underscore.span
    } else if input.peek(Ident::peek_any) {
        input.call(Ident::parse_any)?.span()
    } else {
        bad_value(input)?.span()
    };
    Err(syn::Error::new(
        value,
        format!("`fence` must be an identifier: {what}"),
    ))
}

fn client_value(input: ParseStream<'_>, span: Span) -> syn::Result<Expr> {
    equals(input, "client", "client = self.locks", span)?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(syn::Error::new(
            span,
            "`client` needs an expression of type `LockClient` or `&LockClient`, \
             as in `client = self.locks`",
        ));
    }
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return Err(syn::Error::new(
            lit.span(),
            "`client` is an expression, not a string: write it without quotes, \
             as in `client = self.locks`",
        ));
    }
    input.parse()
}

fn crate_value(input: ParseStream<'_>, span: Span) -> syn::Result<Path> {
    let lit = string_value(input, "crate", "crate = \"::rlock_runtime\"", span)?;
    lit.parse_with(Path::parse_mod_style).map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must name the path of the runtime crate, such as `crate = \"::rlock_runtime\"` \
                 or `crate = \"my_app::locks\"`; `{}` is not a path",
                lit.value().escape_debug()
            ),
        )
    })
}

impl Args {
    /// `#[single_flight]` takes `key`, `ttl`, `wait`, `client` and `crate`: the lease under
    /// which the work runs is the runtime's to keep, not the caller's.
    fn single_flight_options(&self, push: &mut impl FnMut(syn::Error)) {
        let lease_options = [
            ("renew", self.renew.as_ref().map(LitBool::span)),
            ("max_hold", self.max_hold.map(|d| d.span)),
            ("min_hold", self.min_hold.map(|d| d.span)),
            ("on_lost", self.on_lost.map(|_| Span::call_site())),
            ("fence", self.fence.as_ref().map(Ident::span)),
            ("min_replicas", self.min_replicas.map(|_| Span::call_site())),
            ("fair", self.fair.as_ref().map(LitBool::span)),
        ];
        for (option, span) in lease_options {
            if let Some(span) = span {
                push(syn::Error::new(
                    span,
                    format!(
                        "`{option}` does not apply to #[single_flight]: its `ttl` is how long \
                         the result is kept, and the work's lock is renewed while it computes \
                         and dropped if lost; remove `{option}`"
                    ),
                ));
            }
        }
    }

    /// Checks what only makes sense across options, for `attribute`.
    pub(crate) fn check_combination(&self, attribute: Attribute) -> syn::Result<()> {
        let mut errors = Errors::default();
        let mut push = |err: syn::Error| errors.push(err);
        if let (Some(_), Some((_, span))) = (&self.key, &self.keys) {
            push(syn::Error::new(
                *span,
                "give `key` for one lock or `keys` for several, not both",
            ));
        }
        if let Some((_, span)) = &self.keys {
            if attribute != Attribute::DistributedLock {
                push(syn::Error::new(
                    *span,
                    format!(
                        "`keys` is for #[distributed_lock], which takes several locks together; \
                         {} takes one key",
                        attribute.name()
                    ),
                ));
            } else if let Some(fence) = &self.fence {
                push(syn::Error::new(
                    fence.span(),
                    "`fence` binds one fencing token, and `keys` takes several locks; lock each \
                     key on its own for its fence, or remove `fence`",
                ));
            }
        }
        if self.key.is_none() && self.keys.is_none() {
            push(syn::Error::new(
                Span::call_site(),
                format!(
                    "missing `key`: {} needs the name of {}, as in `{}`",
                    attribute.name(),
                    attribute.named(),
                    attribute.example()
                ),
            ));
        }
        match (attribute, self.permits) {
            (Attribute::DistributedLock, Some((_, span))) => push(syn::Error::new(
                span,
                "`permits` is an option of #[semaphore], not of #[distributed_lock] (a lock has \
                 one holder); write `#[semaphore(key = \"…\", permits = 5)]` to let that many \
                 hold it at once, or remove `permits`",
            )),
            (
                Attribute::ReadLock | Attribute::UpgradeableReadLock | Attribute::WriteLock,
                Some((_, span)),
            ) => {
                push(syn::Error::new(
                    span,
                    format!(
                        "`permits` is an option of #[semaphore], not of {}: a read-write lock \
                         has any number of readers or one writer; remove `permits`",
                        attribute.name()
                    ),
                ));
            }
            (Attribute::SingleFlight, Some((_, span))) => push(syn::Error::new(
                span,
                "`permits` is an option of #[semaphore], not of #[single_flight], whose work \
                 runs once at a time; remove `permits`",
            )),
            (Attribute::Semaphore, None) => push(syn::Error::new(
                Span::call_site(),
                "missing `permits`: #[semaphore] needs how many may hold it at once, as in \
                 `#[semaphore(key = \"export:<tenant>\", permits = 5)]`",
            )),
            _ => {}
        }
        match (attribute, self.take, self.permits) {
            (Attribute::Semaphore, Some((take, span)), Some((permits, _))) if take > permits => {
                push(syn::Error::new(
                    span,
                    format!(
                        "`take = {take}` is more than the semaphore's {permits} permits: no call \
                         could ever hold them; take at most `take = {permits}`, or raise \
                         `permits`"
                    ),
                ));
            }
            (Attribute::Semaphore, _, _) | (_, None, _) => {}
            (_, Some((_, span)), _) => push(syn::Error::new(
                span,
                format!(
                    "`take` is an option of #[semaphore], not of {}: it says how many of a \
                     semaphore's permits one call holds; remove `take`",
                    attribute.name()
                ),
            )),
        }
        if let (Attribute::Semaphore, Some(fence)) = (attribute, &self.fence) {
            push(syn::Error::new(
                fence.span(),
                "`fence` does not apply to #[semaphore]: permits carry no fencing token (several \
                 holders at once have no order to fence); remove `fence`",
            ));
        }
        if let (true, Some(fence)) = (attribute.reads(), &self.fence) {
            push(syn::Error::new(
                fence.span(),
                format!(
                    "`fence` does not apply to {}: a read lease carries no fencing token \
                     (readers hold it together and have no order to fence); fence the writes, \
                     with `#[write_lock(…, fence = token)]`, or remove `fence`",
                    attribute.name()
                ),
            ));
        }
        if attribute == Attribute::SingleFlight {
            self.single_flight_options(&mut push);
        }
        let waits = self.wait.is_some_and(|wait| wait.value.0 > 0);
        if let Some(fair) = self.fair.as_ref().filter(|fair| fair.value && !waits) {
            push(syn::Error::new(
                fair.span(),
                "`fair = true` serves waiters in arrival order, but without `wait` the lock is \
                 tried once and nobody waits; add a wait budget such as `wait = \"5s\"`, or \
                 remove `fair`",
            ));
        }
        if let Some(max_hold) = self.max_hold {
            if self.renew.as_ref().is_some_and(|renew| !renew.value) {
                push(syn::Error::new(
                    max_hold.span,
                    "`max_hold` caps how long renewals may keep the lock, but `renew = false` \
                     turns renewal off, so the lease simply ends after `ttl`; remove `max_hold`, \
                     or remove `renew = false`",
                ));
            } else if let Some(ttl) = self.ttl.filter(|ttl| max_hold.value < ttl.value) {
                push(syn::Error::new(
                    max_hold.span,
                    format!(
                        "`max_hold` (`{}`) is shorter than `ttl` (`{}`): the first lease would \
                         already outlast the cap; make `max_hold` at least `{}`, or shorten `ttl`",
                        max_hold.value, ttl.value, ttl.value
                    ),
                ));
            }
        }
        if let (Some(min_hold), Some(max_hold)) = (self.min_hold, self.max_hold)
            && min_hold.value > max_hold.value
        {
            push(syn::Error::new(
                min_hold.span,
                format!(
                    "`min_hold` (`{}`) is longer than `max_hold` (`{}`): the cap ends the hold \
                     before the key may be given up; make `min_hold` at most `{}`, or raise \
                     `max_hold`",
                    min_hold.value, max_hold.value, max_hold.value
                ),
            ));
        }
        errors.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> syn::Result<Args> {
        syn::parse_str::<Args>(text).and_then(|args| {
            args.check_combination(Attribute::DistributedLock)
                .map(|()| args)
        })
    }

    fn error(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("{text:?} parsed"),
            Err(err) => err
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" / "),
        }
    }

    #[test]
    fn every_unknown_option_is_reported_with_our_name_for_it() {
        let err = error(r#"key = "a", leaseTime = "10s", wait_time = "2s", colour = red"#);
        for needle in [
            "unknown option `leaseTime`; rlock calls it `ttl`",
            "unknown option `wait_time`; rlock calls it `wait`",
            "unknown option `colour`; expected one of",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn parses_every_option() {
        let args = parse(
            r#"key = "order:<id>", ttl = "10s", wait = "1m30s", renew = true, max_hold = "1h",
               on_lost = "continue", fence = token, client = self.locks, crate = "::my_rt","#,
        )
        .expect("valid options");
        assert_eq!(args.key.map(|k| k.value()).as_deref(), Some("order:<id>"));
        assert_eq!(args.ttl.map(|d| d.value), Some(Millis(10_000)));
        assert_eq!(args.wait.map(|d| d.value), Some(Millis(90_000)));
        assert_eq!(args.renew.map(|b| b.value), Some(true));
        assert_eq!(args.max_hold.map(|d| d.value), Some(Millis::HOUR));
        assert_eq!(args.on_lost, Some(OnLost::Continue));
        assert_eq!(args.fence.map(|f| f.to_string()).as_deref(), Some("token"));
        assert!(args.client.is_some());
        assert!(args.krate.is_some());
    }

    #[test]
    fn explains_mistakes() {
        for (text, needle) in [
            ("", "missing `key`"),
            ("ttl = \"1s\"", "missing `key`"),
            ("\"order:<id>\"", "write `key = \"order:<id>\"`"),
            (
                "key = \"a\", key = \"b\"",
                "expected only a single `key` argument",
            ),
            (
                "key = \"a\", tll = \"1s\"",
                "unknown option `tll`; did you mean `ttl`? expected one of: key, ttl,",
            ),
            (
                "key = \"a\", timeout = \"1s\"",
                "unknown option `timeout`; rlock calls it `wait`, as in `wait = \"2s\"`; expected one of",
            ),
            ("key = KEY", "`key` must be a string literal"),
            ("key", "expected `=` after `key`"),
            ("key = ", "expected a value after `=`"),
            ("key = \"a\" ttl = \"1s\"", "expected `,` between options"),
            ("key = \"a\", ttl = 10s", "write `ttl = \"10s\"`"),
            ("key = \"a\", ttl = 10", "write `ttl = \"10s\"`"),
            ("key = \"a\", ttl = TTL", "cannot come from an expression"),
            ("key = \"a\", ttl = \"0s\"", "`ttl` may not be 0"),
            ("key = \"a\", ttl = \"5ms\"", "too short"),
            ("key = \"a\", ttl = \"25h\"", "at most `24h`"),
            ("key = \"a\", wait = \"2d\"", "write `48h`"),
            ("key = \"a\", wait = \"48h\"", "at most `24h`"),
            ("key = \"a\", max_hold = \"0s\"", "`max_hold` may not be 0"),
            ("key = \"a\", max_hold = \"200h\"", "7 days"),
            ("key = \"a\", min_hold = \"0s\"", "`min_hold` may not be 0"),
            (
                "key = \"a\", lockAtLeastFor = \"30s\"",
                "rlock calls it `min_hold`, as in `min_hold = \"30s\"`",
            ),
            (
                "key = \"a\", min_hold = \"25h\"",
                "better kept by its scheduler",
            ),
            (
                "key = \"a\", min_hold = \"10m\", max_hold = \"5m\"",
                "longer than `max_hold`",
            ),
            (
                "key = \"a\", ttl = \"10s\", max_hold = \"5s\"",
                "shorter than `ttl`",
            ),
            (
                "key = \"a\", renew = false, max_hold = \"5m\"",
                "`renew = false` turns renewal off",
            ),
            ("key = \"a\", renew = \"true\"", "without quotes"),
            ("key = \"a\", fair = true", "add a wait budget"),
            (
                "key = \"a\", wait = \"0s\", fair = true",
                "add a wait budget",
            ),
            ("key = \"a\", fair = yes", "must be `true` or `false`"),
            ("key = \"a\", renew = 1", "must be `true` or `false`"),
            (
                "key = \"a\", on_lost = \"abrot\"",
                "did you mean `abort`? expected one of: abort, continue",
            ),
            (
                "key = \"a\", on_lost = abort",
                "write `on_lost = \"abort\"`",
            ),
            ("key = \"a\", fence = \"t\"", "without quotes"),
            ("key = \"a\", fence = _", "`_` binds nothing"),
            ("key = \"a\", fence = self", "a keyword"),
            ("key = \"a\", fence = a.b", "plain identifier"),
            ("key = \"a\", client = \"c\"", "not a string"),
            ("key = \"a\", client = ", "needs an expression"),
            ("key = \"a\", crate = \"1x\"", "is not a path"),
            (
                "key = \"a\", crate = rt",
                "`crate` must be a string literal",
            ),
            ("key = \"a\", 42", "expected an option"),
        ] {
            let err = error(text);
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn keys_are_a_list_of_distinct_templates() {
        let Ok(args) = parse("keys = [\"account:<from>\", \"account:<to>\"], wait = \"1s\"") else {
            panic!("a list of keys parses");
        };
        assert_eq!(args.keys.map(|(keys, _)| keys.len()), Some(2));
        for (text, needle) in [
            ("keys = \"a\"", "a list of key templates in brackets"),
            ("keys = []", "at least one key template"),
            (
                "keys = [\"a\", 1]",
                "each of `keys` must be a string literal",
            ),
            ("keys = [\"a\", \"a\"]", "names \"a\" twice"),
            ("key = \"a\", keys = [\"b\"]", "not both"),
            (
                "keys = [\"a\", \"b\"], fence = t",
                "`fence` binds one fencing token",
            ),
        ] {
            assert!(error(text).contains(needle), "{text:?}: {}", error(text));
        }
        let Err(err) = syn::parse_str::<Args>("keys = [\"a\"], permits = 2")
            .and_then(|args| args.check_combination(Attribute::Semaphore))
        else {
            panic!("keys on a semaphore parsed");
        };
        assert!(
            err.to_string()
                .contains("`keys` is for #[distributed_lock]")
        );
    }

    #[test]
    fn semaphores_need_a_count_and_take_no_fence() {
        let semaphore = |text: &str| {
            syn::parse_str::<Args>(text)
                .and_then(|args| args.check_combination(Attribute::Semaphore))
        };
        let Ok(permits) = syn::parse_str::<Args>("key = \"a\", permits = 1000000") else {
            panic!("the largest count parses");
        };
        assert_eq!(permits.permits.map(|(n, _)| n), Some(1_000_000));
        assert!(semaphore("key = \"a\", permits = 5, wait = \"1s\", fair = true").is_ok());
        for (text, needle) in [
            ("key = \"a\"", "missing `permits`"),
            ("key = \"a\", permits = 0", "from 1 to 1000000"),
            ("key = \"a\", permits = 1000001", "from 1 to 1000000"),
            ("key = \"a\", permits = 5u8", "from 1 to 1000000"),
            (
                "key = \"a\", permits = \"5\"",
                "without quotes: `permits = 5`",
            ),
            (
                "key = \"a\", permits = 5, fence = t",
                "`fence` does not apply",
            ),
            ("permits = 5", "needs the name of the semaphore"),
        ] {
            let Err(err) = semaphore(text) else {
                panic!("{text:?} parsed");
            };
            let err = err.to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        assert!(error("key = \"a\", permits = 5").contains("an option of #[semaphore]"));
    }

    #[test]
    fn a_semaphore_call_takes_from_one_permit_to_its_count() {
        let semaphore = |text: &str| {
            syn::parse_str::<Args>(text)
                .and_then(|args| args.check_combination(Attribute::Semaphore))
        };
        assert!(semaphore("key = \"a\", permits = 10, take = 3").is_ok());
        assert!(semaphore("key = \"a\", permits = 3, take = 3").is_ok());
        for (text, needle) in [
            ("key = \"a\", permits = 10, take = 0", "from 1 to 1000"),
            ("key = \"a\", permits = 5000, take = 1001", "from 1 to 1000"),
            (
                "key = \"a\", permits = 10, take = \"3\"",
                "without quotes: `take = 3`",
            ),
            (
                "key = \"a\", permits = 2, take = 3",
                "more than the semaphore's 2 permits",
            ),
        ] {
            let Err(err) = semaphore(text) else {
                panic!("{text:?} parsed");
            };
            let err = err.to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        assert!(error("key = \"a\", take = 2").contains("`take` is an option of #[semaphore]"));
    }

    #[test]
    fn edge_values_are_accepted() {
        for text in [
            "key = \"a\", ttl = \"10ms\"",
            "key = \"a\", ttl = \"24h\"",
            "key = \"a\", wait = \"0s\"",
            "key = \"a\", wait = \"24h\"",
            "key = \"a\", max_hold = \"168h\"",
            "key = \"a\", ttl = \"10s\", max_hold = \"10s\"",
            "key = \"a\", renew = false",
            "key = \"a\", wait = \"1s\", fair = true",
            "key = \"a\", fair = false",
            "key = \"a\", max_hold = \"1s\"",
            "key = \"a\", min_hold = \"24h\"",
            "key = \"a\", ttl = \"10s\", min_hold = \"5m\", max_hold = \"5m\"",
            "key = \"a\", renew = false, min_hold = \"1ms\"",
            "key = \"a\", client = &state.locks",
            "key = \"a\", crate = \"rlock_runtime\"",
        ] {
            assert!(parse(text).is_ok(), "{text}");
        }
    }
}
