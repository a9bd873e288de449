//! The OpenAI error object, `{"error":{"message","type","param","code"}}`, for every
//! failure the server answers, with its status code (docs/serving.md, "Errors").

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failure answered to the client.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `server_error`.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for `Retry-After` (503).
    pub retry_after: Option<u64>,
}

/// `message` on one line: the control characters a client's value may carry into it
/// (a `role` with a newline, a property name with a tab) written as escapes, `\n`.
fn one_line(message: String) -> String {
    if !message.chars().any(char::is_control) {
        return message;
    }
    message
        .chars()
        .map(|c| match c {
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            '\t' => "\\t".to_string(),
            c if c.is_control() => format!("\\u{{{:04x}}}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

/// A client's value as an error message quotes it: whole up to 64 characters, else its
/// first 64 and how long it was, so that a 60 KB `role` makes a 400 of one short line.
pub fn quote(value: &str) -> std::borrow::Cow<'_, str> {
    const MAX: usize = 64;
    match value.char_indices().nth(MAX) {
        None => value.into(),
        Some((end, _)) => format!(
            "{}... ({} characters)",
            &value[..end],
            value.chars().count()
        )
        .into(),
    }
}

/// Marks a response whose body is already an OpenAI error object, so the error
/// normaliser in the middleware leaves it alone.
#[derive(Clone, Copy, Debug)]
pub struct Shaped;

impl ApiError {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            message: one_line(message.into()),
            kind,
            param: None,
            code: Some(code),
            retry_after: None,
        }
    }

    /// 400 `invalid_request_error`.
    pub fn bad(code: &'static str, param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            code,
            message,
        );
        e.param = Some(param.into());
        e
    }

    /// 400 `invalid_request_error`, `code` `invalid_type` or `missing_required_parameter` and so on.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        ApiError::bad("invalid_value", param, message)
    }

    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        ApiError::bad("unsupported_parameter", param, message)
    }

    pub fn unavailable(code: &'static str, message: impl Into<String>, retry_after: u64) -> Self {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            code,
            message,
        );
        e.retry_after = Some(retry_after);
        e
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message,
        )
    }

    /// The error object as JSON (also what a stream sends as `data: {"error":…}`).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }

    /// The error for a response that some layer (axum's router, a body limit)
    /// produced without a body of our shape.
    pub fn for_status(status: StatusCode, method: &str, path: &str, body_limit: usize) -> Self {
        match status {
            StatusCode::NOT_FOUND => ApiError::new(
                status,
                "invalid_request_error",
                "unknown_url",
                format!("Unknown request URL: {method} {path}"),
            ),
            StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
                status,
                "invalid_request_error",
                "method_not_allowed",
                format!("Method {method} is not allowed for {path}"),
            ),
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                status,
                "invalid_request_error",
                "request_too_large",
                format!("The request body is larger than the limit of {body_limit} bytes"),
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
                status,
                "invalid_request_error",
                "unsupported_media_type",
                "The request body must be JSON (Content-Type: application/json)",
            ),
            s if s.is_server_error() => ApiError::internal(format!(
                "internal error ({}); the server keeps running",
                s.as_u16()
            )),
            s => ApiError::new(
                s,
                "invalid_request_error",
                "invalid_request",
                format!("{} {}", s.as_u16(), s.canonical_reason().unwrap_or("error")),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r.extensions_mut().insert(Shaped);
        r
    }
}
