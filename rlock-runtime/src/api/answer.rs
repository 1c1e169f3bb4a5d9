//! How a lock error reads to the clients of a service: an HTTP status code always; with the
//! `axum` or `actix-web` feature a whole HTTP response, with the `tonic` feature a gRPC
//! status. Every answer is safe to send to API clients: it names no key and gives no
//! developer advice. The full error is logged (the `rlock` `tracing` target) and, for
//! actix-web and tonic, kept as the response's source for the service's own middleware.

use crate::error::LockError;

impl LockError {
    /// The HTTP status that answers a request which failed with this error:
    ///
    /// | error | status | why |
    /// |---|---|---|
    /// | [`Busy`](LockError::Busy) | 409 Conflict | another request holds the lock: retry later |
    /// | [`Timeout`](LockError::Timeout), [`Unavailable`](LockError::Unavailable), [`QuorumNotReached`](LockError::QuorumNotReached), [`NotReplicated`](LockError::NotReplicated) | 503 Service Unavailable | Redis could not be relied on |
    /// | [`Lost`](LockError::Lost) and the rest | 500 Internal Server Error | the outcome is unknown, or the service is misconfigured |
    ///
    /// ```
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let client = LockClient::in_memory();
    /// let _held = client.lock("cart:1").acquire().await.unwrap();
    /// let busy = client.sibling().lock("cart:1").acquire().await.unwrap_err();
    /// assert_eq!(busy.http_status(), 409);
    /// # }
    /// ```
    pub fn http_status(&self) -> u16 {
        match Answer::of(self) {
            Answer::Busy => 409,
            Answer::Unavailable => 503,
            Answer::LockLost | Answer::Internal => 500,
        }
    }
}

/// What a failed request is told, whatever the protocol: one of four fixed answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Another request holds the lock: retry shortly.
    Busy,
    /// Redis could not be relied on: retry later.
    Unavailable,
    /// The lease ended before the work did: the outcome is unknown.
    LockLost,
    /// A misconfigured service: retrying will not help.
    Internal,
}

impl Answer {
    fn of(error: &LockError) -> Self {
        if error.is_busy() {
            Self::Busy
        } else if error.is_backend() {
            Self::Unavailable
        } else if error.is_lost() {
            Self::LockLost
        } else {
            Self::Internal
        }
    }
}

#[cfg(any(feature = "axum", feature = "actix-web", feature = "tonic", test))]
impl Answer {
    /// The machine-readable code: `busy`, `unavailable`, `lock_lost` or `internal`.
    fn code(self) -> &'static str {
        match self {
            Self::Busy => "busy",
            Self::Unavailable => "unavailable",
            Self::LockLost => "lock_lost",
            Self::Internal => "internal",
        }
    }

    /// A sentence for API clients, without keys or advice meant for the developer.
    fn message(self) -> &'static str {
        match self {
            Self::Busy => "the resource is being changed by another request; retry shortly",
            Self::Unavailable => {
                "the service cannot coordinate this request right now; retry later"
            }
            Self::LockLost => "the request's outcome is unknown; check before retrying",
            Self::Internal => "the request failed",
        }
    }

    /// The HTTP body: `{"error":"busy","message":"…"}`.
    fn json(self) -> String {
        // Codes and messages are fixed ASCII without quotes or backslashes: no escaping needed.
        format!(
            "{{\"error\":\"{}\",\"message\":\"{}\"}}",
            self.code(),
            self.message()
        )
    }

    /// Logs the error this answer stands for, key and advice included: at debug level for
    /// `busy`, which is routine under contention, as a warning otherwise.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    #[cfg(any(feature = "axum", feature = "actix-web", feature = "tonic"))]
    fn log(self, error: &LockError, protocol: &'static str, status: &dyn std::fmt::Display) {
        let error = error as &(dyn std::error::Error + 'static);
        if self == Self::Busy {
            crate::util::trace::debug_event!(error, protocol, %status, "rlock: lock error answered");
        } else {
            crate::util::trace::warn_event!(error, protocol, %status, "rlock: lock error answered");
        }
    }
}

/// With the `axum` feature, a handler can return `Result<T, LockError>` (or `?` a lock error
/// into its own error type and delegate to this): `409` with `Retry-After: 1` for
/// [`LockError::Busy`], `503` for Redis failures, `500` for a lost lease and configuration
/// errors (see [`LockError::http_status`]), with a JSON body
/// `{"error":"busy","message":"…"}`. The error itself, key and advice included, is logged
/// (a warning; debug for `busy`, which is routine).
///
/// ```
/// use axum_core::response::IntoResponse;
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let _held = client.lock("cart:1").acquire().await.unwrap();
/// let busy = client.sibling().lock("cart:1").acquire().await.unwrap_err();
/// let response = busy.into_response();
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "1");
/// # }
/// ```
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl axum_core::response::IntoResponse for LockError {
    fn into_response(self) -> axum_core::response::Response {
        use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};

        let answer = Answer::of(&self);
        let status = http::StatusCode::from_u16(self.http_status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        answer.log(&self, "HTTP", &status.as_u16());
        let mut response = (status, answer.json()).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if answer == Answer::Busy {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// With the `actix-web` feature, a handler can return `Result<T, LockError>` (or `?` a lock
/// error into `actix_web::Error`): the same answers as with `axum`, `409` with
/// `Retry-After: 1` for [`LockError::Busy`], `503` for Redis failures, `500` for a lost lease
/// and configuration errors (see [`LockError::http_status`]), with the JSON body
/// `{"error":"busy","message":"…"}`. The error is logged as with `axum`, and stays the
/// response's error for middleware (`ServiceResponse::response().error()`).
///
/// ```
/// use actix_web::ResponseError;
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let _held = client.lock("cart:1").acquire().await.unwrap();
/// let busy = client.sibling().lock("cart:1").acquire().await.unwrap_err();
/// let response = busy.error_response();
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers().get("retry-after").unwrap(), "1");
/// # }
/// ```
#[cfg(feature = "actix-web")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix-web")))]
impl actix_web::ResponseError for LockError {
    fn status_code(&self) -> actix_web::http::StatusCode {
        actix_web::http::StatusCode::from_u16(self.http_status())
            .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> actix_web::HttpResponse {
        use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER};

        let answer = Answer::of(self);
        let status = self.status_code();
        answer.log(self, "HTTP", &status.as_u16());
        let mut response = actix_web::HttpResponse::build(status);
        response.insert_header((CONTENT_TYPE, "application/json"));
        if answer == Answer::Busy {
            response.insert_header((RETRY_AFTER, "1"));
        }
        response.body(answer.json())
    }
}

/// With the `tonic` feature, a gRPC method can `?` a lock error into its
/// `Result<Response<T>, Status>`:
///
/// | error | gRPC code | why |
/// |---|---|---|
/// | [`Busy`](LockError::Busy) | `ABORTED` | a concurrency conflict (the code HTTP 409 maps to): retry the whole operation shortly |
/// | [`Timeout`](LockError::Timeout), [`Unavailable`](LockError::Unavailable), [`QuorumNotReached`](LockError::QuorumNotReached), [`NotReplicated`](LockError::NotReplicated) | `UNAVAILABLE` | Redis could not be relied on: retry later |
/// | [`Lost`](LockError::Lost) | `ABORTED` | the lease ended before the work did: check, then retry the whole operation |
/// | the rest | `INTERNAL` | the service is misconfigured |
///
/// Busy is `ABORTED` rather than `RESOURCE_EXHAUSTED`: gRPC keeps `RESOURCE_EXHAUSTED` for
/// quotas and rate limits, and `ABORTED` for conflicts between concurrent requests, which is
/// what a held lock is. To tell busy from lost, a client reads the `rlock-error` metadata
/// (`busy`, `unavailable`, `lock_lost` or `internal`, the `error` of the HTTP body). A busy
/// answer also carries `grpc-retry-pushback-ms: 1000`, the gRPC form of `Retry-After: 1`
/// (clients with a retry policy that lists `ABORTED` wait that long before retrying). The
/// message is the HTTP body's safe sentence; the error itself is logged as over HTTP and
/// kept as the status's [`source`](std::error::Error::source), which is not sent.
///
/// ```
/// use rlock_runtime::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = LockClient::in_memory();
/// let _held = client.lock("cart:1").acquire().await.unwrap();
/// let busy = client.sibling().lock("cart:1").acquire().await.unwrap_err();
/// let status = tonic::Status::from(busy);
/// assert_eq!(status.code(), tonic::Code::Aborted);
/// assert_eq!(status.metadata().get("rlock-error").unwrap(), "busy");
/// # }
/// ```
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<LockError> for tonic::Status {
    fn from(error: LockError) -> Self {
        use tonic::metadata::{MetadataMap, MetadataValue};

        let answer = Answer::of(&error);
        let code = match answer {
            Answer::Busy | Answer::LockLost => tonic::Code::Aborted,
            Answer::Unavailable => tonic::Code::Unavailable,
            Answer::Internal => tonic::Code::Internal,
        };
        answer.log(&error, "gRPC", &code);
        let mut metadata = MetadataMap::new();
        metadata.insert("rlock-error", MetadataValue::from_static(answer.code()));
        if answer == Answer::Busy {
            metadata.insert("grpc-retry-pushback-ms", MetadataValue::from_static("1000"));
        }
        let mut status = tonic::Status::with_metadata(code, answer.message(), metadata);
        status.set_source(std::sync::Arc::new(error));
        status
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Operation;
    use std::time::Duration;

    use super::Answer;
    use crate::LockError;

    #[test]
    fn statuses_and_public_codes() {
        let busy = LockError::Busy {
            key: "order:1".into(),
            waited: Duration::ZERO,
        };
        let lost = LockError::Lost {
            key: "order:1".into(),
        };
        let timeout = LockError::Timeout {
            operation: Operation::Acquire,
            timeout: Duration::from_secs(1),
        };
        for (e, status, code) in [
            (busy, 409, "busy"),
            (timeout, 503, "unavailable"),
            (lost, 500, "lock_lost"),
            (LockError::NotConfigured, 500, "internal"),
        ] {
            let answer = Answer::of(&e);
            assert_eq!((e.http_status(), answer.code()), (status, code), "{e}");
            assert!(!answer.json().contains("order:1"));
        }
    }
}
