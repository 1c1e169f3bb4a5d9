//! Idempotent HTTP requests, after the IETF `Idempotency-Key` header draft
//! (draft-ietf-httpapi-idempotency-key-header): a tower layer, so axum and any tower service
//! can use it.
//!
//! A `POST` or `PATCH` with an `Idempotency-Key` header runs once per key (scoped by the
//! caller's function, e.g. the authenticated user): while it runs, the same key is answered
//! `409 Conflict` (or waits, by option); once it has answered, the same key gets its answer
//! again (status, chosen headers, body) for the retention period, with
//! `Idempotency-Replayed: true`; the same key with another request (method, path and query,
//! body) is answered `422 Unprocessable Content`. The key is held by a lock on
//! `idempotency:<hash of scope and key>` while the request runs, and the answer is kept at
//! `rlock:idempotency:<hash>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, LOCATION};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use sha2::{Digest, Sha256};

use crate::api::client::LockClient;
use crate::error::LockError;

/// The request header that names a request (the draft's).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The response header that marks a replayed answer.
pub const IDEMPOTENCY_REPLAYED: HeaderName = HeaderName::from_static("idempotency-replayed");
/// The longest key accepted, in bytes.
const MOST_KEY_BYTES: usize = 255;
/// The largest request body buffered to fingerprint it, unless the layer says: 1 MiB.
const MOST_REQUEST_BYTES: usize = 1 << 20;
/// The largest answer kept for replay, unless the layer says: 1 MiB.
const MOST_RESPONSE_BYTES: usize = 1 << 20;

/// The function that scopes keys: what makes one caller's key its own (the authenticated
/// user, a tenant), from the request's head.
type Scope = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Makes `POST` and `PATCH` requests that carry an `Idempotency-Key` run once per key across
/// every instance, and replays their answer to retries (see the module's documentation in
/// the README, "Idempotent requests").
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use http::{Request, Response};
/// use rlock_runtime::{IdempotencyLayer, LockClient};
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tower_layer::Layer;
/// use tower_service::Service;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let layer = IdempotencyLayer::new(client)
///     .retention(Duration::from_secs(24 * 60 * 60))
///     .scope(|head| head.headers.get("x-user-id")?.to_str().ok().map(str::to_owned));
/// let mut service = layer.layer(tower_service_fn(|_req: Request<Full<Bytes>>| async {
///     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("order 1"))))
/// }));
/// let order = || {
///     Request::post("/orders")
///         .header("idempotency-key", "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"")
///         .header("x-user-id", "7")
///         .body(Full::new(Bytes::from("{\"voucher\":1}")))
///         .unwrap()
/// };
/// let first = service.call(order()).await.unwrap();
/// let retried = service.call(order()).await.unwrap();
/// assert_eq!(retried.headers()["idempotency-replayed"], "true");
/// # let _ = first;
/// # }
/// # fn tower_service_fn<F, Fut>(f: F) -> impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible, Future = Fut> + Clone
/// # where F: Fn(Request<Full<Bytes>>) -> Fut + Clone, Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>> {
/// #     #[derive(Clone)] struct S<F>(F);
/// #     impl<F, Fut> Service<Request<Full<Bytes>>> for S<F> where F: Fn(Request<Full<Bytes>>) -> Fut, Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>> {
/// #         type Response = Response<Full<Bytes>>; type Error = Infallible; type Future = Fut;
/// #         fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> { std::task::Poll::Ready(Ok(())) }
/// #         fn call(&mut self, req: Request<Full<Bytes>>) -> Fut { (self.0)(req) }
/// #     }
/// #     S(f)
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct IdempotencyLayer {
    config: Arc<Config>,
}

#[derive(Clone)]
struct Config {
    client: LockClient,
    retention: Duration,
    wait: Duration,
    required: bool,
    scope: Option<Arc<Scope>>,
    replayed: Vec<HeaderName>,
    most_request: usize,
    most_response: usize,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        f.debug_struct("IdempotencyLayer")
            .field("retention", &c.retention)
            .field("wait", &c.wait)
            .field("required", &c.required)
            .field("scoped", &c.scope.is_some())
            .field("replayed", &c.replayed)
            .finish_non_exhaustive()
    }
}

impl IdempotencyLayer {
    /// Idempotent requests through `client`: answers kept a day, a request in flight
    /// answered `409` at once, keys unscoped (add [`scope`](Self::scope) where callers are
    /// authenticated), `Content-Type` and `Location` replayed with the status and body.
    pub fn new(client: LockClient) -> Self {
        Self {
            config: Arc::new(Config {
                client,
                retention: Duration::from_secs(24 * 60 * 60),
                wait: Duration::ZERO,
                required: false,
                scope: None,
                replayed: vec![CONTENT_TYPE, LOCATION],
                most_request: MOST_REQUEST_BYTES,
                most_response: MOST_RESPONSE_BYTES,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// How long an answer is replayed (default one day; at most [`MAX_TTL`](crate::MAX_TTL)).
    pub fn retention(self, retention: Duration) -> Self {
        self.with(|c| c.retention = retention.min(crate::MAX_TTL))
    }

    /// How long a request waits for the same key's request in flight, to replay its answer
    /// (default 0: answered `409 Conflict` at once).
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|c| c.wait = wait)
    }

    /// Refuse `POST` and `PATCH` requests without a key (`400 Bad Request`), as the draft
    /// allows a resource to; by default they run as they would without the layer.
    pub fn require_key(self, required: bool) -> Self {
        self.with(|c| c.required = required)
    }

    /// Scopes keys by what `scope` returns for the request's head (the authenticated user, a
    /// tenant): two callers' equal keys are two keys. `None` scopes the key to nobody in
    /// particular (one shared scope).
    pub fn scope(self, scope: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.with(|c| c.scope = Some(Arc::new(scope)))
    }

    /// Replays `header` too (besides `Content-Type` and `Location`) when it was in the
    /// answer.
    pub fn replay_header(self, header: HeaderName) -> Self {
        self.with(|c| c.replayed.push(header))
    }

    /// The largest request body buffered to fingerprint it (default 1 MiB): a larger one is
    /// answered `413 Content Too Large`.
    pub fn max_request_body(self, bytes: usize) -> Self {
        self.with(|c| c.most_request = bytes)
    }

    /// The largest answer body kept for replay (default 1 MiB): a larger answer is given to
    /// its request and not kept, so a retry runs again.
    pub fn max_response_body(self, bytes: usize) -> Self {
        self.with(|c| c.most_response = bytes)
    }
}

impl<S> tower_layer::Layer<S> for IdempotencyLayer {
    type Service = Idempotent<S>;

    fn layer(&self, inner: S) -> Idempotent<S> {
        Idempotent {
            inner,
            config: self.config.clone(),
        }
    }
}

/// A service behind an [`IdempotencyLayer`].
#[derive(Clone)]
pub struct Idempotent<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Idempotent<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotent")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, RB> tower_service::Service<Request<B>> for Idempotent<S>
where
    S: tower_service::Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<crate::BoxError>,
    RB: Body + From<Bytes> + Send + 'static,
    RB::Data: Send,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was made ready goes with this call; the next call readies its own.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let config = self.config.clone();
        Box::pin(serve(config, inner, request))
    }
}

/// What a request asks of the layer.
enum Asked {
    /// Not a request the layer keeps (another method, or no key where none is required).
    Through,
    /// A key, as the hash that names its lock and its answer.
    Key(String),
}

async fn serve<S, B, RB>(
    config: Arc<Config>,
    mut inner: S,
    request: Request<B>,
) -> Result<Response<RB>, S::Error>
where
    S: tower_service::Service<Request<B>, Response = Response<RB>>,
    B: Body + From<Bytes>,
    B::Error: Into<crate::BoxError>,
    RB: Body + From<Bytes>,
{
    let (head, body) = request.into_parts();
    let id = match asked(&config, &head) {
        Ok(Asked::Through) => return inner.call(Request::from_parts(head, body)).await,
        Ok(Asked::Key(id)) => id,
        Err(answer) => return Ok(answer.response()),
    };
    let Ok(body) = Limited::new(body, config.most_request).collect().await else {
        return Ok(Answer::TooLarge.response());
    };
    let body = body.to_bytes();
    let fingerprint = fingerprint(&head, &body);
    let record_key = record_key(&config.client, &id);
    let engine = &config.client.shared().engine;

    match replayed(engine.read_value(&record_key).await, &fingerprint) {
        Ok(Some(answer)) => return Ok(answer),
        Ok(None) => {}
        Err(answer) => return Ok(answer.response()),
    }
    let lock = config.client.lock(format!("idempotency:{id}"));
    let guard = match lock.wait(config.wait).acquire().await {
        Ok(guard) => guard,
        Err(e) if e.is_busy() => {
            // Another request with this key runs; with a wait, it ran out.
            let stored = engine.read_value(&record_key).await;
            return Ok(match replayed(stored, &fingerprint) {
                Ok(Some(answer)) => answer,
                Ok(None) => Answer::InFlight.response(),
                Err(answer) => answer.response(),
            });
        }
        Err(e) => return Ok(Answer::Unavailable(e).response()),
    };
    // The answer stored between the read above and the grant.
    match replayed(engine.read_value(&record_key).await, &fingerprint) {
        Ok(Some(answer)) => {
            let _ = guard.release().await;
            return Ok(answer);
        }
        Ok(None) => {}
        Err(answer) => {
            let _ = guard.release().await;
            return Ok(answer.response());
        }
    }
    let response = inner.call(Request::from_parts(head, B::from(body))).await;
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    // A server error is not kept: a retry runs again.
    if response.status().is_server_error() {
        let _ = guard.release().await;
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let Ok(body) = body.collect().await else {
        let _ = guard.release().await;
        return Ok(Answer::Unreadable.response());
    };
    let body = body.to_bytes();
    if body.len() <= config.most_response {
        let record = Record::of(&fingerprint, &parts, &config.replayed, &body);
        // An answer that could not be kept is still this request's: a retry runs again.
        let _ = engine
            .write_value(&record_key, &record, config.retention)
            .await;
    }
    let _ = guard.release().await;
    Ok(Response::from_parts(parts, RB::from(body)))
}

/// What the request's head asks of the layer, or the answer to a bad key.
fn asked(config: &Config, head: &Parts) -> Result<Asked, Answer> {
    if head.method != Method::POST && head.method != Method::PATCH {
        return Ok(Asked::Through);
    }
    let Some(value) = head.headers.get(&IDEMPOTENCY_KEY) else {
        return if config.required {
            Err(Answer::BadKey(
                "this resource needs an Idempotency-Key header",
            ))
        } else {
            Ok(Asked::Through)
        };
    };
    let key = key_of(value).ok_or(Answer::BadKey(
        "the Idempotency-Key header must be a string of 1 to 255 characters, such as \
         \"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
    ))?;
    let scope = config.scope.as_ref().and_then(|scope| scope(head));
    let mut id = Sha256::new();
    // Length-prefixed, so that no scope and key can pass for another pair.
    for part in [scope.as_deref().unwrap_or("").as_bytes(), key.as_bytes()] {
        id.update((part.len() as u64).to_be_bytes());
        id.update(part);
    }
    Ok(Asked::Key(hex(&id.finalize())))
}

/// The key of a header value: a structured-field string (`"…"`, as the draft writes it) or,
/// as many clients send it, the bare token; `None` when empty, too long or not text.
fn key_of(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?.trim();
    let key = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(text);
    (!key.is_empty() && key.len() <= MOST_KEY_BYTES && !key.contains(['"', '\\'])).then_some(key)
}

/// The request's fingerprint: its method, path and query, and body.
fn fingerprint(head: &Parts, body: &[u8]) -> String {
    let mut print = Sha256::new();
    for part in [
        head.method.as_str().as_bytes(),
        head.uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes(),
        body,
    ] {
        print.update((part.len() as u64).to_be_bytes());
        print.update(part);
    }
    hex(&print.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the answer to the key whose hash is `id` is kept.
fn record_key(client: &LockClient, id: &str) -> String {
    match client.shared().namespace.as_deref() {
        Some(ns) => format!("{ns}:rlock:idempotency:{id}"),
        None => format!("rlock:idempotency:{id}"),
    }
}

/// The stored answer replayed, if there is one for this request; the `422` if it was another
/// request's; `503` if it could not be read.
fn replayed<RB: From<Bytes>>(
    stored: Result<Option<Vec<u8>>, LockError>,
    fingerprint: &str,
) -> Result<Option<Response<RB>>, Answer> {
    let stored = stored.map_err(Answer::Unavailable)?;
    let Some(record) = stored.as_deref().and_then(Record::parse) else {
        return Ok(None);
    };
    if record.fingerprint != fingerprint {
        return Err(Answer::OtherRequest);
    }
    let mut response = Response::new(RB::from(record.body));
    *response.status_mut() = record.status;
    for (name, value) in record.headers {
        response.headers_mut().append(name, value);
    }
    response
        .headers_mut()
        .insert(IDEMPOTENCY_REPLAYED, HeaderValue::from_static("true"));
    Ok(Some(response))
}

/// A kept answer: a JSON line (fingerprint, status, headers), then the body's bytes.
struct Record {
    fingerprint: String,
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

impl Record {
    /// The stored form of an answer.
    fn of(
        fingerprint: &str,
        parts: &http::response::Parts,
        replayed: &[HeaderName],
        body: &[u8],
    ) -> Vec<u8> {
        let headers: Vec<serde_json::Value> = replayed
            .iter()
            .flat_map(|name| {
                parts.headers.get_all(name).iter().filter_map(move |value| {
                    Some(serde_json::json!([name.as_str(), value.to_str().ok()?]))
                })
            })
            .collect();
        let head = serde_json::json!({
            "fingerprint": fingerprint,
            "status": parts.status.as_u16(),
            "headers": headers,
        });
        let mut record = head.to_string().into_bytes();
        record.push(b'\n');
        record.extend_from_slice(body);
        record
    }

    /// An answer from its stored form; `None` for anything else.
    fn parse(stored: &[u8]) -> Option<Self> {
        let split = stored.iter().position(|b| *b == b'\n')?;
        let head: serde_json::Value = serde_json::from_slice(&stored[..split]).ok()?;
        let status = StatusCode::from_u16(u16::try_from(head["status"].as_u64()?).ok()?).ok()?;
        let headers = head["headers"]
            .as_array()?
            .iter()
            .map(|pair| {
                let name = HeaderName::from_bytes(pair[0].as_str()?.as_bytes()).ok()?;
                let value = HeaderValue::from_str(pair[1].as_str()?).ok()?;
                Some((name, value))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            fingerprint: head["fingerprint"].as_str()?.to_owned(),
            status,
            headers,
            body: Bytes::copy_from_slice(&stored[split + 1..]),
        })
    }
}

/// The layer's own answers.
enum Answer {
    BadKey(&'static str),
    TooLarge,
    InFlight,
    OtherRequest,
    Unreadable,
    Unavailable(LockError),
}

impl Answer {
    fn response<RB: From<Bytes>>(self) -> Response<RB> {
        let (status, text): (StatusCode, std::borrow::Cow<'static, str>) = match self {
            Self::BadKey(why) => (StatusCode::BAD_REQUEST, why.into()),
            Self::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is too large to be made idempotent".into(),
            ),
            Self::InFlight => (
                StatusCode::CONFLICT,
                "a request with this Idempotency-Key is being processed; retry later".into(),
            ),
            Self::OtherRequest => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "this Idempotency-Key was used for another request".into(),
            ),
            Self::Unreadable => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the answer could not be read".into(),
            ),
            Self::Unavailable(e) => {
                let error = &e as &(dyn std::error::Error + 'static);
                crate::util::trace::debug_event!(error, "rlock: idempotency store unavailable");
                let _ = error; // read by the event only when `tracing` is on
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the idempotency store is unavailable; retry later".into(),
                )
            }
        };
        let mut response = Response::new(RB::from(Bytes::from(text.into_owned())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_a_quoted_or_bare_string_of_1_to_255_bytes() {
        let key = |text: &str| key_of(&HeaderValue::from_str(text).unwrap()).map(str::to_owned);
        assert_eq!(key("\"abc\"").as_deref(), Some("abc"));
        assert_eq!(key(" abc ").as_deref(), Some("abc"));
        assert_eq!(
            key(&"a".repeat(255)).as_deref(),
            Some("a".repeat(255).as_str())
        );
        for bad in ["", "\"\"", "a\"b", "\"a\\\"\"", &"a".repeat(256)] {
            assert_eq!(key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_answer_is_kept_and_read_back_whole() {
        let response = Response::builder()
            .status(StatusCode::CREATED)
            .header(CONTENT_TYPE, "application/json")
            .header("x-internal", "not replayed")
            .body(())
            .unwrap();
        let (parts, ()) = response.into_parts();
        let body = b"{\"order\":1}\n\xff binary";
        let stored = Record::of("print", &parts, &[CONTENT_TYPE, LOCATION], body);
        let record = Record::parse(&stored).unwrap();
        assert_eq!(record.fingerprint, "print");
        assert_eq!(record.status, StatusCode::CREATED);
        assert_eq!(
            record.headers,
            [(CONTENT_TYPE, HeaderValue::from_static("application/json"))]
        );
        assert_eq!(&record.body[..], body);
        assert!(Record::parse(b"not a record").is_none());
        assert!(Record::parse(b"{\"status\":99999}\n").is_none());
    }

    #[test]
    fn a_fingerprint_tells_method_target_and_body_apart() {
        let head = |method: &str, uri: &str| {
            Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        let base = fingerprint(&head("POST", "/orders?a=1"), b"x");
        assert_eq!(base, fingerprint(&head("POST", "/orders?a=1"), b"x"));
        for other in [
            fingerprint(&head("PATCH", "/orders?a=1"), b"x"),
            fingerprint(&head("POST", "/orders?a=2"), b"x"),
            fingerprint(&head("POST", "/orders?a=1"), b"y"),
        ] {
            assert_ne!(base, other);
        }
    }
}
