//! The `#[distributed_lock]` attribute of rlock.
//!
//! Depend on `rlock-runtime`, which re-exports the attribute and holds everything the
//! generated code calls; this crate only parses, checks and expands. The layout follows
//! tracing-attributes and thiserror-impl: `item` reads the function (its body kept as
//! tokens), `args` parses the options, `duration` and `template` their values, `signature`
//! collects the names a signature binds, `validate` checks the signature, `resolve` the key
//! against it, `codegen` writes the code, and `expand` runs them all, reporting every error
//! together (`errors`). `limits`, `private` and `grammar` (the duration parser's own source)
//! are what the runtime takes from here through hidden macros.

mod args;
mod attribute;
mod codegen;
mod duration;
mod errors;
mod expand;
#[cfg(test)]
mod fuzz;
mod grammar;
mod item;
mod limits;
mod private;
mod resolve;
mod signature;
mod suggest;
mod template;
mod validate;

use proc_macro::TokenStream;

/// Runs an `async fn` only while this process holds a distributed lock.
///
/// ```
/// use rlock_runtime::{LockClient, LockError, distributed_lock};
///
/// #[derive(Debug)]
/// enum AppError { Lock(LockError), SoldOut }
/// impl From<LockError> for AppError {
///     fn from(err: LockError) -> Self { AppError::Lock(err) }
/// }
///
/// #[distributed_lock(key = "order:<user_id>", ttl = "10s")]
/// async fn create_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> {
///     // Runs only while this process holds the lock `order:<user_id>`.
///     if voucher_id == 0 { return Err(AppError::SoldOut); }
///     Ok(voucher_id)
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// rlock_runtime::install(LockClient::in_memory()); // or LockClient::connect(url).await?
/// assert_eq!(create_order(42, 7).await.unwrap(), 7);
/// # }
/// ```
///
/// The function keeps its signature, attributes, docs, visibility, generics and where-clause;
/// only its body is wrapped. Before the body runs the lock is acquired; if that fails (busy
/// after the wait budget, Redis unreachable, no client configured) the function returns
/// `Err(LockError::….into())` and the body never runs. While the body runs the lease is renewed;
/// when the body finishes, returns early, fails with `?` or panics, the lock is released (a
/// cancelled or panicking call releases in the background). Calling another annotated function
/// with the same key and client from inside the body re-enters the lock instead of deadlocking.
///
/// # What it applies to
///
/// An `async fn` with a body that returns `Result<T, E>` where `E: From<LockError>` (so
/// `LockError` itself, or an application error with a `From` impl; type aliases such as
/// `anyhow::Result<T>` work too): free functions, inherent methods and trait-impl methods
/// (`&self`, `&mut self`, `self`), generic functions, `impl Trait` arguments, borrowed
/// parameters and lifetimes. The returned future is `Send` whenever the body's is, so it can
/// be `tokio::spawn`ed.
///
/// # Options
///
/// | option | meaning | default |
/// |---|---|---|
/// | [`key = "order:<user_id>"`](#key) | the lock's name: literal text plus placeholders | required (or `keys`) |
/// | [`keys = ["account:<from>", "account:<to>"]`](#keys) | several locks taken together, all or none | instead of `key` |
/// | [`ttl = "10s"`](#ttl) | lease length | the client's default ttl (30 s unless configured) |
/// | [`wait = "2s"`](#wait) | how long to wait when the lock is busy | the client's default wait (`0s`, try once, unless configured) |
/// | [`renew = true`](#renew) | renew the lease while the body runs | `true` |
/// | [`max_hold = "5m"`](#max_hold) | hard cap on holding, renewals included | none |
/// | [`min_hold = "30s"`](#min_hold) | the key stays taken this long after the grant, even if the body ends sooner (a job lock) | none |
/// | [`on_lost = "abort"`](#on_lost) | what happens when the lease is lost | the client's default (`"abort"` unless configured) |
/// | [`fence = token`](#fence) | binds the fencing token (`u64`) as a local | none |
/// | [`min_replicas = 1`](#min_replicas) | the grant counts once this many replicas confirm it | the client's default (0) |
/// | [`fair = true`](#fair) | waiters are granted in arrival order across all instances | `false` (still queued) |
/// | [`client = expr`](#client) | the `LockClient` to use | the installed default |
/// | [`crate = "path"`](#crate) | path of the runtime crate | found automatically |
///
/// Durations are string literals checked at compile time: a number and a unit (`ms`, `s`, `m`,
/// `h`), combinable from the largest unit to the smallest, each unit at most once: `500ms`,
/// `10s`, `1m30s`, `2h`, `1h30m` (`LockClient::from_env` reads durations with the same
/// grammar). Limits: `ttl` from `10ms` to `24h` (renewal runs every ttl/3, so a shorter lease
/// cannot be kept; a longer one is a leak, not a lease: keep `ttl` short and let renewal
/// extend it), `wait` from `0s` to `24h`, `max_hold` from `1ms` to `168h` (7 days) and at
/// least `ttl`, `min_hold` from `1ms` to `24h` and at most `max_hold`.
///
/// ## `key`
///
/// The lock's name. Literal text is used as written; a placeholder in angle brackets is
/// replaced by a value rendered through its `Display` impl:
///
/// - `<param>`: a parameter, or any name a parameter pattern binds
///   (`Path(user_id): Path<u64>` makes `<user_id>` usable, as do tuple and struct patterns,
///   `mut x` and `ref x`);
/// - `<param.field.field>`, `<param.0>`: a field path (fields are reached through references
///   and `Deref` like ordinary field access);
/// - `<self.field>`: a field of the receiver, in methods.
///
/// `<<` and `>>` stand for a literal `<` and `>`; `{{` and `}}` for a literal `{` and `}` (a
/// single brace is literal too, as in a hash tag: `{orders}:<id>`).
///
/// Placeholders written the way other tools write them are refused when they name a
/// parameter, since as literal text they would make one global lock for every call:
/// `{user_id}` (`format!`), `${user_id}` and `#{user_id}` (Spring), and a key starting with
/// `#user_id` (lock4j's SpEL) fail to compile with "placeholders are written `<user_id>`".
/// Write `{{user_id}}` if the braces and the name are really meant literally.
///
/// Rendered values are escaped by the runtime
/// (`KeyBuilder::value`): the characters `% : { } * ? [ ] \ / | # ,`, whitespace and
/// control characters are percent-encoded, so `order:<id>` with `id = "1:2"` becomes
/// `order:1%3A2`. A value therefore cannot forge a separator, pick a cluster hash slot or act
/// as a glob, and plain values stay readable (`order:42`). For the same reason two placeholders
/// must be separated by literal text containing one of `:` `/` `|` `#` `,` `{` `}` `*` `?`
/// `[` `]` `\`: `<a><b>` would render `1`,`23` and `12`,`3` to the same key.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// struct Path<T>(T);
/// struct Cart { owner: u64 }
///
/// #[distributed_lock(key = "cart:<cart.owner>:<sku>", client = client)]
/// async fn add_item(client: &LockClient, cart: &Cart, Path(sku): Path<String>) -> Result<(), LockError> {
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # add_item(&LockClient::in_memory(), &Cart { owner: 1 }, Path("a:b".into())).await.unwrap();
/// # }
/// ```
///
/// Without the macro (the key `cart:1:a%3Ab`):
///
/// ```
/// # use rlock_runtime::{KeyBuilder, LockClient, LockError, LockOptions};
/// # struct Cart { owner: u64 }
/// async fn add_item(client: &LockClient, cart: &Cart, sku: String) -> Result<(), LockError> {
///     let key = KeyBuilder::new().literal("cart:").value(&cart.owner).literal(":").value(&sku).finish()?;
///     client.with_lock(key, LockOptions::new(), async {
///         Ok(())
///     }).await?
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # add_item(&LockClient::in_memory(), &Cart { owner: 1 }, "a:b".into()).await.unwrap();
/// # }
/// ```
///
/// ## `ttl`
///
/// How long the lease lasts if it is not renewed (the `PX` of `SET NX PX`). With renewal on,
/// it is also how quickly the lock frees itself after this process dies. Without `ttl` the
/// client's default applies (`LockClientBuilder::default_ttl`, 30 s unless configured).
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "report:<day>", ttl = "1m30s")]
/// async fn build_report(day: u32) -> Result<(), LockError> { Ok(()) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory()); build_report(1).await.unwrap();
/// # }
/// ```
///
/// Without the macro:
///
/// ```
/// # use rlock_runtime::{LockClient, LockError};
/// # use std::time::Duration;
/// async fn build_report(client: &LockClient, day: u32) -> Result<(), LockError> {
///     let guard = client.lock(format!("report:{day}")).ttl(Duration::from_secs(90)).acquire().await?;
///     // … the body …
///     guard.release().await
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # build_report(&LockClient::in_memory(), 1).await.unwrap();
/// # }
/// ```
///
/// ## `wait`
///
/// How long to wait for a busy lock before returning `LockError::Busy`. `0s` tries once;
/// without `wait`, the client's default applies (`LockClientBuilder::default_wait`, `0s`
/// unless configured). Waiters are woken by the holder's release rather than by polling.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "stock:<sku>", wait = "2s")]
/// async fn reserve(sku: u32) -> Result<(), LockError> { Ok(()) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory()); reserve(1).await.unwrap();
/// # }
/// ```
///
/// Without the macro: `client.lock(key).wait(Duration::from_secs(2)).acquire().await?`.
///
/// ## `renew`
///
/// Whether the watchdog renews the lease (every ttl/3) while the body runs. With
/// `renew = false` the lease ends after `ttl` even if the body is still running, so pick a
/// `ttl` longer than the body can take.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "once-a-minute", ttl = "1m", renew = false)]
/// async fn tick() -> Result<(), LockError> { Ok(()) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory()); tick().await.unwrap();
/// # }
/// ```
///
/// Without the macro: `client.lock(key).ttl(Duration::from_secs(60)).renew(false).acquire().await?`.
///
/// ## `keys`
///
/// Several locks taken together, all of them or none ([`LockClient::lock_all`]): "transfer
/// between two accounts". Each template is checked like `key`'s; the list must not be empty
/// nor name a template twice, and `fence` does not apply (one fence cannot stand for several
/// keys). The keys are taken in one canonical order whatever order they are written in, so
/// two functions naming the same keys in different orders never deadlock; the body is
/// dropped when any key's lease is lost. A nested call locking one of the keys re-enters it.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "1s")]
/// async fn transfer(from: u64, to: u64, amount: u64) -> Result<u64, LockError> {
///     Ok(amount) // both accounts are held here
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory()); transfer(1, 2, 40).await.unwrap();
/// # }
/// ```
///
/// Without the macro: `client.lock_all([format!("account:{from}"), format!("account:{to}")]).wait(d).run(body).await`.
///
/// [`LockClient::lock_all`]: https://docs.rs/rlock-runtime/latest/rlock_runtime/struct.LockClient.html#method.lock_all
///
/// ## `max_hold`
///
/// A hard cap on how long the lock is held, renewals included: renewal stops extending the
/// lease past it, so a stuck body cannot hold the lock forever. Must be at least `ttl`, and
/// cannot be combined with `renew = false` (without renewal the lease already ends at `ttl`).
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "import:<batch>", ttl = "10s", max_hold = "5m")]
/// async fn import(batch: u64) -> Result<(), LockError> { Ok(()) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory()); import(1).await.unwrap();
/// # }
/// ```
///
/// Without the macro: `client.lock(key).ttl(Duration::from_secs(10)).max_hold(Duration::from_secs(300)).acquire().await?`.
///
/// ## `min_hold`
///
/// A job lock (ShedLock's `lockAtLeastFor`): the key stays taken at least this long after the
/// grant, even when the body ends sooner, so that a job every instance's scheduler starts at
/// the same moment runs once. A body that ends before `min_hold` leaves the key to end on
/// Redis's clock when `min_hold` does (nobody is handed it); one that runs longer releases as
/// usual. It may be longer than `ttl` (renewal keeps the lease while the body runs) and at
/// most `max_hold`. Without `wait`, the other instances' calls return `LockError::Busy` at
/// once: skip the run on it.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "job:daily-report", min_hold = "30s")]
/// async fn daily_report() -> Result<(), LockError> { Ok(()) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory());
/// daily_report().await.unwrap();
/// // Another instance's scheduler, a moment late:
/// assert!(daily_report().await.unwrap_err().is_busy());
/// # }
/// ```
///
/// Without the macro: `client.lock(key).min_hold(Duration::from_secs(30)).acquire().await?`.
///
/// ## `on_lost`
///
/// What happens when the lease is known lost while the body runs (a renewal found another
/// owner, or Redis stayed unreachable past the lease):
///
/// - `"abort"` (default): the body's future is dropped at its next `.await` and the call
///   returns `LockError::Lost`; a loss found at release also turns `Ok` into `Lost`.
/// - `"continue"`: the body runs to completion and its result is returned; the loss is
///   reported through `tracing` and the counters. Use it with a fencing token.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "ledger:<id>", on_lost = "continue", fence = token)]
/// async fn append(id: u64) -> Result<u64, LockError> { Ok(token) }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory()); append(1).await.unwrap();
/// # }
/// ```
///
/// Without the macro: `LockOptions::new().on_lost(OnLost::Continue)` given to
/// `client.with_lock(key, options, body)`.
///
/// ## `fence`
///
/// Binds the fencing token of this acquisition as a `u64` local with the given name inside
/// the body. Tokens of a key strictly increase across holders and lease expiries: pass it to
/// the storage you write to, and have it reject writes with a token lower than one it has seen,
/// so a holder whose lease silently ended cannot overwrite its successor's work.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "doc:<id>", client = client, fence = token)]
/// async fn save(client: &LockClient, id: u64) -> Result<u64, LockError> {
///     // e.g. UPDATE docs SET body = $1, fence = $token WHERE id = $id AND fence < $token
///     Ok(token)
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let client = LockClient::in_memory();
/// # let first = save(&client, 1).await.unwrap();
/// # assert!(save(&client, 1).await.unwrap() > first);
/// # }
/// ```
///
/// Without the macro: `client.lock(key).fenced().acquire().await?` and
/// `let token = guard.fence().map_or(0, Fence::get);`. Only a function that binds a fence asks
/// Redis for one (a second key write per acquisition).
///
/// ## `min_replicas`
///
/// The grant counts only once this many replicas confirm they have it (`WAIT`, Redisson's
/// `syncSlaves`); when fewer do within the command timeout, the lock is released and
/// `LockError::NotReplicated` returned before the body runs. It closes the failover window in
/// which a lock granted just before the master died is missing on the promoted replica; it is
/// not consensus. A whole number from 0 to 64; not available on Redlock.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "payout:<id>", client = client, min_replicas = 1)]
/// async fn pay_out(client: &LockClient, id: u64) -> Result<u64, LockError> {
///     Ok(id)
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # // In process there is nothing to replicate to: the grant counts as confirmed.
/// # assert_eq!(pay_out(&LockClient::in_memory(), 7).await.unwrap(), 7);
/// # }
/// ```
///
/// Without the macro: `client.lock(key).min_replicas(1).acquire().await?`.
///
/// ## `fair`
///
/// Waiters are granted the lock strictly in the order they arrived, across all instances
/// (Redisson's fair lock). Every waiter already stands in the lock's queue in Redis and a
/// release hands the lock to the first live one; `fair` adds that a call finding the lock free
/// never takes it past a live waiter that queued earlier. A waiter whose process dies stops
/// blocking the queue within 5 s. Needs a `wait` budget; not available on Redlock.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// #[distributed_lock(key = "ticket:<event>", client = client, wait = "5s", fair = true)]
/// async fn book(client: &LockClient, event: u64) -> Result<u64, LockError> {
///     Ok(event)
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # assert_eq!(book(&LockClient::in_memory(), 7).await.unwrap(), 7);
/// # }
/// ```
///
/// Without the macro: `client.lock(key).wait(budget).fair().acquire().await?`.
///
/// ## `client`
///
/// The client to lock with: an expression of type `LockClient`, `&LockClient` or
/// `Arc<LockClient>`, evaluated before the body runs and able to use the parameters
/// (`self.locks`, `state.locks`, a `&LockClient` parameter). Without it the client installed
/// with `rlock_runtime::install` is used, and a call before `install` returns
/// `LockError::NotConfigured`.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, distributed_lock};
/// struct Orders { locks: LockClient, placed: u32 }
///
/// impl Orders {
///     #[distributed_lock(key = "order:<user_id>", client = self.locks)]
///     async fn place(&mut self, user_id: u64) -> Result<u32, LockError> {
///         self.placed += 1;
///         Ok(self.placed)
///     }
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let mut orders = Orders { locks: LockClient::in_memory(), placed: 0 };
/// # assert_eq!(orders.place(1).await.unwrap(), 1);
/// # }
/// ```
///
/// Without the macro: `self.locks.lock(format!("order:{user_id}")).acquire().await?`.
///
/// ## `crate`
///
/// The path of the runtime crate in generated code. It is found automatically, also when the
/// dependency is renamed in `Cargo.toml` (`locks = { package = "rlock-runtime", … }`); set it
/// when the runtime is reached through a re-export.
///
/// ```
/// mod infra { pub use ::rlock_runtime as locks; }
///
/// #[rlock_runtime::distributed_lock(key = "job:<id>", crate = "crate::infra::locks")]
/// async fn job(id: u32) -> Result<(), rlock_runtime::LockError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// # Equivalent code
///
/// The function
///
/// ```ignore
/// #[distributed_lock(key = "order:<user_id>", ttl = "10s", fence = token)]
/// async fn create_order(user_id: u64, voucher_id: u64) -> Result<OrderId, AppError> {
///     body
/// }
/// ```
///
/// expands to (modulo type checks that report mistakes on your own tokens)
///
/// ```ignore
/// async fn create_order(user_id: u64, voucher_id: u64) -> Result<OrderId, AppError> {
///     let client = rlock_runtime::installed().ok_or(LockError::NotConfigured);
///     let key = KeyBuilder::new().literal("order:").value(&user_id).finish();
///     let options = LockOptions::new().ttl(Duration::from_secs(10)) /* .wait(..) .renew(..) .on_lost(..) */;
///     run_locked(client, key, options, move |token: u64| async move { body }).await
/// }
/// ```
///
/// # Compile-time checks
///
/// Mistakes are reported where they are written, with the fix in the message: a missing,
/// repeated or unknown option (with "did you mean"), a key that is not a string literal, a
/// malformed placeholder (`<`, `<>`, `< a>`, `>`, `<a.>`, `<a..b>`, `<1a>`), a placeholder
/// that names no parameter (with the closest name) or `_`, `<self…>` without a receiver,
/// placeholders without a separator, a function that is not `async` or does not return a
/// `Result`, an unparsable, zero or out-of-range duration, `max_hold` below `ttl` or with
/// `renew = false`, an unknown `on_lost`, a `fence` that is not a name, a `crate` that is not
/// a path, a placeholder whose type does not implement `Display` (reported on the parameter's
/// type as well as at the key) and a `client` that is not a lock client. After an error the
/// function is still emitted unchanged, so one mistake gives one error.
///
/// A field that does not exist (`<req.usr_id>`) is reported by rustc itself, on the key: "no
/// field `usr_id` on type `Request`", with the field's closest name. On stable Rust a macro
/// cannot point inside a string literal, so rustc shows that name replacing the whole key
/// (`key = user_id`); keep the key and change only the field (`"order:<req.user_id>"`).
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}

/// Runs an `async fn` holding one of `permits` permits of a Redis semaphore: at most that
/// many calls across every instance run the body at once (Redisson's
/// `RPermitExpirableSemaphore`).
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, semaphore};
/// #[semaphore(key = "export:<tenant>", permits = 5, wait = "10s")]
/// async fn export(tenant: &str) -> Result<usize, LockError> {
///     Ok(tenant.len()) // at most five exports of one tenant at a time
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory());
/// assert_eq!(export("acme").await.unwrap(), 4);
/// # }
/// ```
///
/// It takes `#[distributed_lock]`'s options (`key`, `ttl`, `wait`, `renew`, `max_hold`,
/// `min_hold`, `on_lost`, `min_replicas`, `fair`, `client`, `crate`, checked the same way at
/// compile time) and `permits`, a whole number from 1 to 1,000,000, required. `fence` does
/// not apply: permits carry no fencing token. Each permit is a lease of its own, renewed while
/// the body runs and given back when it ends; a crashed instance's permit comes back when its
/// lease ends, by Redis's clock. The count is stored with the permits: every caller of one key
/// must name the same `permits`, or gets `LockError::InvalidConfig`. A nested call of the same
/// semaphore in the same task re-enters the permit held instead of taking a second.
///
/// `take = n` (from 1 to the count, at most 1,000) makes each call hold `n` permits at once,
/// as one lease: a heavy export takes 3 of a tenant's 10 slots with
/// `#[semaphore(key = "export:<tenant>", permits = 10, take = 3)]`. Waiting for several
/// permits is in arrival order: the permits that come free are kept for the call at the
/// head of the queue, so calls taking one permit never starve it.
///
/// Without the macro: `client.semaphore(key, 5).wait(Duration::from_secs(10)).run(body).await`
/// (and `.permits(n)` for `take = n`).
#[proc_macro_attribute]
pub fn semaphore(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(attribute::Attribute::Semaphore, args.into(), item.into()).into()
}

/// Runs an `async fn` holding the read lock of a Redis read-write lock: any number of calls
/// read at once across every instance, none while a writer holds it (Redisson's
/// `RReadWriteLock.readLock()`).
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, read_lock};
/// #[read_lock(key = "config:<id>", wait = "2s")]
/// async fn read_config(id: u64) -> Result<String, LockError> {
///     Ok(format!("config {id}")) // never while a writer changes it
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory());
/// assert_eq!(read_config(42).await.unwrap(), "config 42");
/// # }
/// ```
///
/// It takes `#[distributed_lock]`'s options (`key`, `ttl`, `wait`, `renew`, `max_hold`,
/// `min_hold`, `on_lost`, `min_replicas`, `fair`, `client`, `crate`, checked the same way at
/// compile time) but `fence` (a read lease carries no fencing token) and `keys`. Waiters are
/// served in arrival order, so a waiting writer holds back new readers. A call made inside a
/// locked write scope of the key (a `#[write_lock]` function's body, or a write lock's `run`)
/// reads beside it (a downgrade); a `#[write_lock]` call made inside a read scope of the key
/// fails at once with `LockError::WouldDeadlock` instead of waiting for itself. (A write
/// guard downgrades with `LockGuard::downgrade`.)
///
/// Without the macro: `client.read_lock(key).wait(Duration::from_secs(2)).run(body).await`.
#[proc_macro_attribute]
pub fn read_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(attribute::Attribute::ReadLock, args.into(), item.into()).into()
}

/// Runs an `async fn` holding the upgradeable read lock of a Redis read-write lock
/// (DistributedLock's `UpgradeableReadLock`): it reads beside any readers, one such call at a
/// time across every instance, and may become the writer without letting another writer in
/// between: a `#[write_lock]` call of the same key made inside its body is its upgrade, which
/// waits for the readers already in (none come in meanwhile), and is always fenced. After the
/// write, the body reads on.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, upgradeable_read_lock, write_lock};
/// #[write_lock(key = "config:<id>", fence = token)]
/// async fn write_config(id: u64, value: &str) -> Result<u64, LockError> {
///     let _ = (id, value); // store the value with `token`
///     Ok(token)
/// }
///
/// #[upgradeable_read_lock(key = "config:<id>", wait = "2s")]
/// async fn migrate_config(id: u64) -> Result<bool, LockError> {
///     let outdated = true; // read it, beside other readers
///     if outdated {
///         write_config(id, "v2").await?; // the upgrade: no writer came between
///     }
///     Ok(outdated)
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory());
/// assert!(migrate_config(42).await.unwrap());
/// # }
/// ```
///
/// It takes [`macro@read_lock`]'s options. (An upgradeable read guard upgrades with
/// `LockGuard::upgrade`.)
///
/// Without the macro: `client.upgradeable_read_lock(key).wait(Duration::from_secs(2)).run(body).await`.
#[proc_macro_attribute]
pub fn upgradeable_read_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(
        attribute::Attribute::UpgradeableReadLock,
        args.into(),
        item.into(),
    )
    .into()
}

/// Runs an `async fn` holding the write lock of a Redis read-write lock: one call at a time
/// across every instance, with no reader beside it (Redisson's
/// `RReadWriteLock.writeLock()`).
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, write_lock};
/// #[write_lock(key = "config:<id>", wait = "2s", fence = token)]
/// async fn write_config(id: u64, value: &str) -> Result<u64, LockError> {
///     let _ = (id, value); // store the value with `token`, refused if a later one was seen
///     Ok(token)
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory());
/// assert!(write_config(42, "on").await.unwrap() > 0);
/// # }
/// ```
///
/// It takes `#[distributed_lock]`'s options but `keys`, `fence` included. See
/// [`macro@read_lock`] for waiting and for downgrades.
///
/// Without the macro: `client.write_lock(key).wait(Duration::from_secs(2)).run(body).await`.
#[proc_macro_attribute]
pub fn write_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(attribute::Attribute::WriteLock, args.into(), item.into()).into()
}

/// Runs an `async fn` once across every instance for each key, and gives its result to
/// every caller of the key within the `ttl` (single-flight): the first caller runs the body;
/// callers that come meanwhile, in any process, wait (herd-free) and receive its result,
/// which is kept in Redis as JSON. A caller that finds the body failed, or its caller gone,
/// runs the body itself.
///
/// ```
/// # use rlock_runtime::{LockClient, LockError, single_flight};
/// #[single_flight(key = "report:<id>", ttl = "30s", wait = "10s")]
/// async fn build_report(id: u64) -> Result<Vec<u64>, LockError> {
///     Ok(vec![id]) // runs once per id across every instance while its result is kept
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # rlock_runtime::install(LockClient::in_memory());
/// assert_eq!(build_report(42).await.unwrap(), [42]);
/// # }
/// ```
///
/// It takes `key`, `ttl` (how long the result is kept, and given to every caller; default
/// the client's default ttl), `wait` (how long a caller waits while another runs the body;
/// default the ttl), `client` and `crate`, checked as `#[distributed_lock]`'s are. The
/// options of a lock's lease (`renew`, `max_hold`, `min_hold`, `on_lost`, `fence`,
/// `min_replicas`, `fair`) and `permits` and `keys` do not apply. The function returns
/// `Result<T, E>` with `T: Serialize + DeserializeOwned` and `E: From<LockError>`.
///
/// Without the macro: `client.once(key).ttl(d).wait(d).run(|| body).await`.
#[proc_macro_attribute]
pub fn single_flight(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(attribute::Attribute::SingleFlight, args.into(), item.into()).into()
}

/// A limit of a lock as a literal (`__limit!(MAX_TTL_MS)`), from which `rlock-runtime`
/// defines its constants, so that the attribute and the runtime check the same limits. Not
/// for users: it may change in any release.
#[doc(hidden)]
#[proc_macro]
pub fn __limit(name: TokenStream) -> TokenStream {
    limits::expand(name.into()).into()
}

/// The items of the duration grammar (`parse`, `Millis`) that `#[distributed_lock]` checks its
/// `ttl`, `wait` and `max_hold` with, as source, so that `rlock-runtime` reads durations from
/// the environment with the very same parser. Not for users: it may change in any release.
#[doc(hidden)]
#[proc_macro]
pub fn __duration_grammar(input: TokenStream) -> TokenStream {
    grammar::expand(input.into()).into()
}

/// Declares `rlock-runtime`'s support module under its versioned name
/// (`__private_module!(crate::private)` → `pub mod __private_0_1 { pub use crate::private::*; }`),
/// the name generated code calls through. Not for users: it may change in any release.
#[doc(hidden)]
#[proc_macro]
pub fn __private_module(source: TokenStream) -> TokenStream {
    private::expand_module(source.into()).into()
}
