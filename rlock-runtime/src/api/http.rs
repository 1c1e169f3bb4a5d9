//! How a lock error reads to an HTTP client: a status code always, and with the `axum`
//! feature a whole response. The answer is safe to send to API clients: it names no key and
//! gives no developer advice; the full error is logged (the `rlock` `tracing` target).

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
        if self.is_busy() {
            409
        } else if self.is_backend() {
            503
        } else {
            500
        }
    }

    /// The machine-readable code of the answer: `busy`, `unavailable`, `lock_lost` or
    /// `internal`.
    #[cfg(any(feature = "axum", test))]
    fn public_code(&self) -> &'static str {
        match self.http_status() {
            409 => "busy",
            503 => "unavailable",
            _ if self.is_lost() => "lock_lost",
            _ => "internal",
        }
    }

    /// A sentence for API clients, without keys or advice meant for the developer.
    #[cfg(any(feature = "axum", test))]
    fn public_message(&self) -> &'static str {
        match self.public_code() {
            "busy" => "the resource is being changed by another request; retry shortly",
            "unavailable" => "the service cannot coordinate this request right now; retry later",
            "lock_lost" => "the request's outcome is unknown; check before retrying",
            _ => "the request failed",
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

        let status =
            http::StatusCode::from_u16(self.http_status()).unwrap_or(http::StatusCode::CONFLICT);
        if self.is_busy() {
            crate::util::trace::debug_event!(
                error = &self as &(dyn std::error::Error + 'static),
                "rlock: answered HTTP 409"
            );
        } else {
            crate::util::trace::warn_event!(
                error = &self as &(dyn std::error::Error + 'static),
                status = status.as_u16(),
                "rlock: lock error answered over HTTP"
            );
        }
        // Codes and messages are fixed ASCII without quotes or backslashes: no escaping needed.
        let body = format!(
            "{{\"error\":\"{}\",\"message\":\"{}\"}}",
            self.public_code(),
            self.public_message()
        );
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.is_busy() {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Operation;
    use std::time::Duration;

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
            assert_eq!((e.http_status(), e.public_code()), (status, code), "{e}");
            assert!(!e.public_message().contains("order:1"));
        }
    }
}
