//! Property test: no input makes the macro panic.
//!
//! Feeds random and mutated key templates and option lists through the template parser, the
//! option parser and the whole expansion, and requires a clean `Ok` or `Err` every time. The
//! generator is a tiny xorshift PRNG with a fixed seed, so a failure is reproducible.

use std::panic::{AssertUnwindSafe, catch_unwind};

use proc_macro2::TokenStream;

use crate::args::{Args, OPTIONS};
use crate::{expand, template};

/// xorshift64*: small, fast and good enough to explore an input space.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const TEMPLATE_SEEDS: &[&str] = &[
    "order:<user_id>",
    "a:<x>:<y>",
    "<self.id>/<req.user.0>",
    "cart:<a.b.c>|<d>",
    "plain-key",
    "<<literal>>:<x>",
    "<x><y>",
    "< a>",
    "<a..b>",
    "<1a>",
    "ünï:<日本>",
];

const TEMPLATE_PIECES: &[&str] = &[
    "<", ">", "<<", ">>", ".", "..", ":", "/", "|", "#", ",", "{", "}", "*", "?", "[", "]", "\\",
    "%", "-", " ", "a", "x", "_", "0", "1", "01", "self", "user_id", "y", "é", "日", "\u{0}", "(",
    ")", "\"", "r#", "ab", "z9",
];

fn random_template(rng: &mut Rng) -> String {
    if rng.below(2) == 0 {
        let mut text = String::new();
        for _ in 0..rng.below(12) {
            text.push_str(rng.pick(TEMPLATE_PIECES));
        }
        text
    } else {
        let seed = rng.pick(TEMPLATE_SEEDS);
        mutate(rng, seed, TEMPLATE_PIECES)
    }
}

/// Inserts, deletes or replaces a few pieces of `seed`, at character boundaries.
fn mutate(rng: &mut Rng, seed: &str, pieces: &[&str]) -> String {
    let mut text = seed.to_string();
    for _ in 0..1 + rng.below(4) {
        let boundaries: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(text.len()))
            .collect();
        let at = boundaries[rng.below(boundaries.len())];
        match rng.below(3) {
            0 => text.insert_str(at, rng.pick(pieces)),
            1 => {
                if let Some(c) = text[at..].chars().next() {
                    text.replace_range(at..at + c.len_utf8(), "");
                }
            }
            _ => {
                if let Some(c) = text[at..].chars().next() {
                    let piece = rng.pick(pieces);
                    text.replace_range(at..at + c.len_utf8(), piece);
                }
            }
        }
    }
    text
}

const OPTION_SEEDS: &[&str] = &[
    r#"key = "order:<user_id>""#,
    r#"key = "order:<user_id>", ttl = "10s", wait = "2s""#,
    r#"key = "a:<self.name>", client = self.locks, fence = token"#,
    r#"key = "<user_id>:<voucher_id>", max_hold = "5m", renew = true, on_lost = "continue""#,
    r#"key = "x", crate = "::rlock_runtime", renew = false"#,
    r#"key = "<p.0>", ttl = "1m30s", max_hold = "2h""#,
];

/// Tokens mixed with the option names (`args::OPTIONS`) into random option lists.
const OPTION_TOKENS: &[&str] = &[
    "=",
    "1",
    "1000",
    ",",
    "\"",
    "\"10s\"",
    "\"0s\"",
    "\"25h\"",
    "\"1.5s\"",
    "\"<x>\"",
    "\"<user_id>\"",
    "\"abort\"",
    "true",
    "false",
    "self",
    "_",
    "10s",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    ".",
    "::",
    "tll",
    "\"<self.a>\"",
    "\"<\"",
    "\"<>\"",
    "\"a<b\"",
    "42",
    "'a'",
    "r#x",
    "#",
    "-",
    " ",
    "é",
];

const ITEMS: &[&str] = &[
    "async fn create_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> { Ok(user_id) }",
    "pub async fn run(&mut self, req: Req, p: (u8, u8)) -> Result<(), E> { Ok(()) }",
    "async fn h(Path(user_id): Path<u64>, State(state): State<App>, _: u8) -> Result<(), E> { Ok(()) }",
    "fn not_async(x: u8) { }",
];

/// Runs `f`, turning a panic into a test failure that shows the input.
fn no_panic<T>(input: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(_) => panic!("the macro panicked on input {input:?}"),
    }
}

#[test]
fn random_inputs_never_panic() {
    // Silence the default hook: a panic is reported through `no_panic` with its input.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = catch_unwind(run_cases);
    std::panic::set_hook(hook);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn run_cases() {
    const CASES: usize = 100_000;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let option_pieces: Vec<&str> = OPTIONS.iter().chain(OPTION_TOKENS).copied().collect();
    let items: Vec<TokenStream> = ITEMS
        .iter()
        .map(|item| item.parse().expect("fixture items lex"))
        .collect();
    let (mut ok, mut err) = (0usize, 0usize);
    for case in 0..CASES {
        // Templates straight into the template parser.
        let text = random_template(&mut rng);
        let parsed = no_panic(&text, || {
            template::parse(&text).and_then(|t| template::check_separators(&t))
        });
        match parsed {
            Ok(()) => ok += 1,
            Err(_) => err += 1,
        }

        // Option lists through the option parser, and every tenth one through the whole
        // expansion (which also resolves the template against a signature).
        let options = if rng.below(3) == 0 {
            // A random template inside an otherwise valid option list.
            format!("key = {:?}, ttl = \"10s\"", random_template(&mut rng))
        } else if rng.below(2) == 0 {
            let seed = rng.pick(OPTION_SEEDS);
            mutate(&mut rng, seed, &option_pieces)
        } else {
            (0..rng.below(10))
                .map(|_| rng.pick(&option_pieces))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let Ok(tokens) = options.parse::<TokenStream>() else {
            err += 1;
            continue;
        };
        let args = no_panic(&options, || {
            syn::parse2::<Args>(tokens.clone()).and_then(|args| {
                args.check_combination(crate::attribute::Attribute::DistributedLock)
            })
        });
        match args {
            Ok(()) => ok += 1,
            Err(_) => err += 1,
        }
        if case % 10 == 0 {
            let item = items[rng.below(items.len())].clone();
            no_panic(&options, || expand::distributed_lock(tokens, item));
        }
    }
    // Both outcomes must be well represented, or the generator is not exploring.
    assert!(ok > CASES / 20, "only {ok} inputs were accepted");
    assert!(err > CASES / 20, "only {err} inputs were rejected");
}
