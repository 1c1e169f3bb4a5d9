//! The actix-web middleware of idempotent requests: see the parent module. It keeps the same
//! rules as the tower layer ([`IdempotencyLayer`](crate::IdempotencyLayer)), in actix-web's
//! types.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{Error, HttpMessage as _, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use futures_util::future::{LocalBoxFuture, Ready, ready};

use super::{Answer, Before, KEY_HEADER, REPLAYED_HEADER, Rules, Stored, fingerprint};
use crate::api::client::LockClient;

/// The function that scopes keys, from the request (the authenticated user, a tenant).
type Scope = dyn Fn(&ServiceRequest) -> Option<String> + Send + Sync;

/// Makes `POST` and `PATCH` requests that carry an `Idempotency-Key` run once per key across
/// every instance, and replays their answer to retries: the actix-web form of
/// [`IdempotencyLayer`](crate::IdempotencyLayer), with the same rules and answers.
///
/// ```
/// use actix_web::{App, web};
/// use rlock_runtime::{IdempotencyMiddleware, LockClient};
///
/// let client = LockClient::in_memory();
/// let app = App::new()
///     .wrap(IdempotencyMiddleware::new(client).scope(|req| {
///         req.headers().get("x-user-id")?.to_str().ok().map(str::to_owned)
///     }))
///     .route("/orders", web::post().to(|| async { "order 1" }));
/// # drop(app);
/// ```
#[derive(Clone)]
#[must_use]
pub struct IdempotencyMiddleware {
    rules: Arc<Rules>,
    scope: Option<Arc<Scope>>,
}

impl std::fmt::Debug for IdempotencyMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyMiddleware")
            .field("rules", &self.rules)
            .field("scoped", &self.scope.is_some())
            .finish()
    }
}

impl IdempotencyMiddleware {
    /// Idempotent requests through `client`, as [`IdempotencyLayer::new`](crate::IdempotencyLayer::new).
    pub fn new(client: LockClient) -> Self {
        Self {
            rules: Arc::new(Rules::new(client)),
            scope: None,
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Rules)) -> Self {
        change(Arc::make_mut(&mut self.rules));
        self
    }

    /// How long an answer is replayed (default one day; at most [`MAX_TTL`](crate::MAX_TTL)).
    pub fn retention(self, retention: Duration) -> Self {
        self.with(|r| r.retention = retention.min(crate::MAX_TTL))
    }

    /// How long a request waits for the same key's request in flight (default 0: `409`).
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|r| r.wait = wait)
    }

    /// Refuse `POST` and `PATCH` requests without a key (`400`).
    pub fn require_key(self, required: bool) -> Self {
        self.with(|r| r.required = required)
    }

    /// Scopes keys by what `scope` returns for the request.
    pub fn scope(
        mut self,
        scope: impl Fn(&ServiceRequest) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.scope = Some(Arc::new(scope));
        self
    }

    /// Replays `header` too (besides `Content-Type` and `Location`).
    pub fn replay_header(self, header: &str) -> Self {
        self.with(|r| r.replayed.push(header.to_ascii_lowercase()))
    }

    /// The largest request body buffered to fingerprint it (default 1 MiB; larger: `413`).
    pub fn max_request_body(self, bytes: usize) -> Self {
        self.with(|r| r.most_request = bytes)
    }

    /// The largest answer body kept for replay (default 1 MiB; larger: not kept).
    pub fn max_response_body(self, bytes: usize) -> Self {
        self.with(|r| r.most_response = bytes)
    }
}

impl<S, B> Transform<S, ServiceRequest> for IdempotencyMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Transform = IdempotentService<S>;
    type InitError = ();
    type Future = Ready<Result<IdempotentService<S>, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(IdempotentService {
            inner: Rc::new(service),
            rules: self.rules.clone(),
            scope: self.scope.clone(),
        }))
    }
}

/// A service behind an [`IdempotencyMiddleware`].
pub struct IdempotentService<S> {
    inner: Rc<S>,
    rules: Arc<Rules>,
    scope: Option<Arc<Scope>>,
}

impl<S> std::fmt::Debug for IdempotentService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentService")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for IdempotentService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<ServiceResponse<BoxBody>, Error>>;

    actix_web::dev::forward_ready!(inner);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        let (inner, rules, scope) = (self.inner.clone(), self.rules.clone(), self.scope.clone());
        Box::pin(serve(inner, rules, scope, request))
    }
}

async fn serve<S, B>(
    inner: Rc<S>,
    rules: Arc<Rules>,
    scope: Option<Arc<Scope>>,
    mut request: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody + 'static,
{
    let keyed = request.method() == Method::POST || request.method() == Method::PATCH;
    let key = request.headers().get(KEY_HEADER).map(HeaderValue::as_bytes);
    let scope = scope.as_ref().and_then(|scope| scope(&request));
    let id = match rules.asked(keyed, key, scope) {
        Ok(Some(id)) => id,
        Ok(None) => return Ok(inner.call(request).await?.map_into_boxed_body()),
        Err(answer) => return Ok(request.into_response(answered(answer))),
    };
    // The body, up to the limit: a stream of chunks that ends or passes it.
    let mut payload = request.take_payload();
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > rules.most_request {
            return Ok(request.into_response(answered(Answer::TooLarge)));
        }
        body.extend_from_slice(&chunk);
    }
    let body = body.freeze();
    request.set_payload(Payload::from(body.clone()));
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let print = fingerprint(request.method().as_str(), target, &body);
    let running = match rules.before(&id, &print).await {
        Before::Replay(stored) => return Ok(request.into_response(replayed(stored))),
        Before::Answer(answer) => return Ok(request.into_response(answered(answer))),
        Before::Run(running) => running,
    };
    let response = match inner.call(request).await {
        Ok(response) => response,
        Err(e) => {
            rules.after(running, None).await;
            return Err(e);
        }
    };
    let (request, response) = response.into_parts();
    let (head, body) = response.into_parts();
    let Ok(body) = actix_web::body::to_bytes(body).await else {
        rules.after(running, None).await;
        return Ok(ServiceResponse::new(request, answered(Answer::Unreadable)));
    };
    let answer = rules.answer(head.status().as_u16(), body, |name| {
        let values = head.headers().get_all(name);
        values
            .filter_map(|v| Some(v.to_str().ok()?.to_owned()))
            .collect()
    });
    rules.after(running, Some(&answer)).await;
    let response = head.set_body(answer.body).map_into_boxed_body();
    Ok(ServiceResponse::new(request, response))
}

/// A kept answer, replayed.
fn replayed(stored: Stored) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = HttpResponse::with_body(status, stored.body).map_into_boxed_body();
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response.headers_mut().insert(
        HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static("true"),
    );
    response
}

/// One of the middleware's own answers, as plain text.
fn answered(answer: Answer) -> HttpResponse {
    let (status, text) = answer.status_and_text();
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response =
        HttpResponse::with_body(status, Bytes::from_static(text.as_bytes())).map_into_boxed_body();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
