//! The tower layer (axum and any tower service) of idempotent requests: see the parent
//! module.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};

use super::{Answer, Before, KEY_HEADER, REPLAYED_HEADER, Rules, Stored, fingerprint};
use crate::api::client::LockClient;

/// The request header that names a request (the draft's).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(KEY_HEADER);
/// The response header that marks a replayed answer.
pub const IDEMPOTENCY_REPLAYED: HeaderName = HeaderName::from_static(REPLAYED_HEADER);

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
    rules: Rules,
    scope: Option<Arc<Scope>>,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("rules", &self.config.rules)
            .field("scoped", &self.config.scope.is_some())
            .finish()
    }
}

impl IdempotencyLayer {
    /// Idempotent requests through `client`: answers kept a day, a request in flight
    /// answered `409` at once, keys unscoped (add [`scope`](Self::scope) where callers are
    /// authenticated), `Content-Type` and `Location` replayed with the status and body.
    pub fn new(client: LockClient) -> Self {
        Self {
            config: Arc::new(Config {
                rules: Rules::new(client),
                scope: None,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// How long an answer is replayed (default one day; at most [`MAX_TTL`](crate::MAX_TTL)).
    pub fn retention(self, retention: Duration) -> Self {
        self.with(|c| c.rules.retention = retention.min(crate::MAX_TTL))
    }

    /// How long a request waits for the same key's request in flight, to replay its answer
    /// (default 0: answered `409 Conflict` at once).
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|c| c.rules.wait = wait)
    }

    /// Refuse `POST` and `PATCH` requests without a key (`400 Bad Request`), as the draft
    /// allows a resource to; by default they run as they would without the layer.
    pub fn require_key(self, required: bool) -> Self {
        self.with(|c| c.rules.required = required)
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
        self.with(|c| c.rules.replayed.push(header.as_str().to_owned()))
    }

    /// The largest request body buffered to fingerprint it (default 1 MiB): a larger one is
    /// answered `413 Content Too Large`.
    pub fn max_request_body(self, bytes: usize) -> Self {
        self.with(|c| c.rules.most_request = bytes)
    }

    /// The largest answer body kept for replay (default 1 MiB): a larger answer is given to
    /// its request and not kept, so a retry runs again.
    pub fn max_response_body(self, bytes: usize) -> Self {
        self.with(|c| c.rules.most_response = bytes)
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
    let rules = &config.rules;
    let (head, body) = request.into_parts();
    let keyed = head.method == Method::POST || head.method == Method::PATCH;
    let key = head
        .headers
        .get(&IDEMPOTENCY_KEY)
        .map(HeaderValue::as_bytes);
    let scope = config.scope.as_ref().and_then(|scope| scope(&head));
    let id = match rules.asked(keyed, key, scope) {
        Ok(Some(id)) => id,
        Ok(None) => return inner.call(Request::from_parts(head, body)).await,
        Err(answer) => return Ok(answered(answer)),
    };
    let Ok(body) = Limited::new(body, rules.most_request).collect().await else {
        return Ok(answered(Answer::TooLarge));
    };
    let body = body.to_bytes();
    let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
    let print = fingerprint(head.method.as_str(), target, &body);
    let running = match rules.before(&id, &print).await {
        Before::Replay(stored) => return Ok(replayed(stored)),
        Before::Answer(answer) => return Ok(answered(answer)),
        Before::Run(running) => running,
    };
    let response = match inner.call(Request::from_parts(head, B::from(body))).await {
        Ok(response) => response,
        Err(e) => {
            rules.after(running, None).await;
            return Err(e);
        }
    };
    let (parts, body) = response.into_parts();
    let Ok(body) = body.collect().await else {
        rules.after(running, None).await;
        return Ok(answered(Answer::Unreadable));
    };
    let body = body.to_bytes();
    let answer = rules.answer(parts.status.as_u16(), body, |name| {
        let values = parts.headers.get_all(name).iter();
        values
            .filter_map(|v| Some(v.to_str().ok()?.to_owned()))
            .collect()
    });
    rules.after(running, Some(&answer)).await;
    Ok(Response::from_parts(parts, RB::from(answer.body)))
}

/// A kept answer, replayed.
fn replayed<RB: From<Bytes>>(stored: Stored) -> Response<RB> {
    let mut response = Response::new(RB::from(stored.body));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
        .headers_mut()
        .insert(IDEMPOTENCY_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// One of the layer's own answers, as plain text.
fn answered<RB: From<Bytes>>(answer: Answer) -> Response<RB> {
    let (status, text) = answer.status_and_text();
    let mut response = Response::new(RB::from(Bytes::from_static(text.as_bytes())));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
