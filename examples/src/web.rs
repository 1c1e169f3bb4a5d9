//! The flash sale as an HTTP service (axum): the handler itself carries the lock.
//!
//! | request | answer |
//! |---|---|
//! | `POST /vouchers/{id}/orders` with header `x-user-id: N` | `201` `{"order":…,"voucher_id":…,"user_id":…}` |
//! | … again with the same `Idempotency-Key` (a client's retry) | the first answer again, `Idempotency-Replayed: true` |
//! | … with that key but another voucher | `422`: the key was used for another request |
//! | … while the same user's other request is in flight | `409` `{"error":"busy",…}`, `Retry-After: 1` |
//! | … when the user already has an order | `409` `{"error":"already_ordered",…}` |
//! | … when the stock is gone | `409` `{"error":"sold_out",…}` |
//! | … without a usable `x-user-id` | `400` `{"error":"missing_user",…}` |
//! | … when Redis is down or too slow | `503` `{"error":"unavailable",…}` |
//! | `GET /vouchers/{id}` | `200` `{"voucher_id":…,"stock":…,"orders":…}` |
//! | `GET /metrics` | `200`, rlock's metrics in the Prometheus text format ([`prometheus`](crate::prometheus)) |
//!
//! Lock errors are answered by rlock's own `IntoResponse` (the `axum` feature), which keeps
//! keys and developer advice out of the body and logs them instead; a lost lease is `500`
//! `lock_lost` (the order's outcome is unknown to this request). Unknown vouchers answer `404`. Every instance of the service behind a load balancer
//! shares the locks through Redis, so "one order per user" holds across instances.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rlock_runtime::{IdempotencyLayer, LockClient, LockError, distributed_lock};
use serde::Serialize;

use crate::seckill::{OrderError, Shop, Store};

/// The header that names the user placing the order.
pub const USER_HEADER: &str = "x-user-id";

/// The state every handler sees: the lock client and the order service.
#[derive(Debug, Clone)]
pub struct App {
    /// The lock client, named by the handler's `client = state.locks`.
    pub locks: LockClient,
    /// The order logic and its store.
    pub shop: Shop,
}

impl App {
    /// An app whose orders live in `store` and whose locks are taken with `locks`.
    pub fn new(store: Store, locks: LockClient) -> Self {
        Self {
            shop: Shop::new(store, locks.clone(), true),
            locks,
        }
    }

    /// Puts `voucher_id` on sale with `stock`, deleting its earlier orders.
    pub async fn open_voucher(&self, voucher_id: u64, stock: u64) -> Result<(), OrderError> {
        self.shop.store.reset(voucher_id, stock).await
    }
}

/// The service's routes. Orders are idempotent requests: a client that retries one with its
/// `Idempotency-Key` (a timeout, a double click) gets the first answer, not a second order
/// and not a `409`; keys are scoped by the user.
pub fn router(app: App) -> Router {
    let idempotent = IdempotencyLayer::new(app.locks.clone()).scope(|head| {
        let user = head.headers.get(USER_HEADER)?;
        user.to_str().ok().map(str::to_owned)
    });
    Router::new()
        .route("/vouchers/{id}", get(voucher))
        .route("/vouchers/{id}/orders", post(create_order))
        .route("/metrics", get(metrics))
        .layer(idempotent)
        .with_state(app)
}

/// `GET /metrics`: what rlock recorded (acquisitions, busy answers, lost leases, wait and hold
/// times per key template), for Prometheus to scrape.
async fn metrics() -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::prometheus::install().render(),
    )
}

/// The user placing the request, from the `x-user-id` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserId(pub u64);

impl<S: Send + Sync> FromRequestParts<S> for UserId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .headers
            .get(USER_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse().ok())
            .map(UserId)
            .ok_or(ApiError::MissingUser)
    }
}

/// The body of `201 Created`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OrderCreated {
    /// The order's number within the voucher.
    pub order: u64,
    /// The voucher ordered.
    pub voucher_id: u64,
    /// The user who ordered.
    pub user_id: u64,
}

/// `POST /vouchers/{id}/orders`: one order per user, whichever instance the request hits.
///
/// The lock `order:<user_id>` is held for the whole handler; a second request of the same
/// user arriving meanwhile is answered `409` at once rather than queued (`wait` is zero).
#[distributed_lock(key = "order:<user_id>", client = state.locks, ttl = "10s")]
async fn create_order(
    State(state): State<App>,
    Path(voucher_id): Path<u64>,
    UserId(user_id): UserId,
) -> Result<(StatusCode, Json<OrderCreated>), ApiError> {
    let order = state.shop.place_order(voucher_id, user_id).await?;
    let created = OrderCreated {
        order,
        voucher_id,
        user_id,
    };
    Ok((StatusCode::CREATED, Json(created)))
}

/// The body of `GET /vouchers/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VoucherState {
    /// The voucher.
    pub voucher_id: u64,
    /// Its remaining stock.
    pub stock: i64,
    /// Orders created so far.
    pub orders: u64,
}

/// `GET /vouchers/{id}`: remaining stock and orders so far.
async fn voucher(
    State(state): State<App>,
    Path(voucher_id): Path<u64>,
) -> Result<Json<VoucherState>, ApiError> {
    let store = &state.shop.store;
    let stock = store
        .stock(voucher_id)
        .await?
        .ok_or(OrderError::UnknownVoucher)?;
    let orders = store.tally(voucher_id).await?.orders;
    Ok(Json(VoucherState {
        voucher_id,
        stock,
        orders,
    }))
}

/// Why a request failed; each case has its status code and a JSON body
/// `{"error": code, "message": text}`.
#[derive(Debug)]
pub enum ApiError {
    /// The order logic or a lock refused or failed.
    Order(OrderError),
    /// No usable `x-user-id` header.
    MissingUser,
}

impl From<OrderError> for ApiError {
    fn from(e: OrderError) -> Self {
        Self::Order(e)
    }
}

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        Self::Order(OrderError::Lock(e))
    }
}

/// The body of every error answer.
#[derive(Debug, Serialize)]
struct ErrorBody {
    error: &'static str,
    message: String,
}

impl ApiError {
    /// The status code and the machine-readable code of the answer.
    pub fn status(&self) -> (StatusCode, &'static str) {
        match self {
            Self::MissingUser => (StatusCode::BAD_REQUEST, "missing_user"),
            Self::Order(e) => match e {
                OrderError::AlreadyOrdered => (StatusCode::CONFLICT, "already_ordered"),
                OrderError::SoldOut => (StatusCode::CONFLICT, "sold_out"),
                OrderError::UnknownVoucher => (StatusCode::NOT_FOUND, "unknown_voucher"),
                OrderError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                // Answered by rlock's `IntoResponse`; the status is the same.
                OrderError::Lock(e) => (
                    StatusCode::from_u16(e.http_status())
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    "lock",
                ),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Order(OrderError::Lock(e)) = self {
            return e.into_response();
        }
        let (status, error) = self.status();
        let message = match &self {
            Self::MissingUser => {
                format!("send the ordering user's id in the `{USER_HEADER}` header")
            }
            Self::Order(e) => e.to_string(),
        };
        (status, Json(ErrorBody { error, message })).into_response()
    }
}
