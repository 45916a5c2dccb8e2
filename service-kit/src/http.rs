//! HTTP pieces every service's router uses: one refusal shape for errors
//! that layers and axum produce themselves, a trace span that names the
//! route and never the path (paths carry lookup ids, topics, cursors), and
//! CORS from the operator's origin list.

use axum::Json;
use axum::body::Body;
use axum::extract::MatchedPath;
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::trace::TraceLayer;

/// A refusal in the services' shape: `{"error": code, "message": …}`.
pub fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({"error": code, "message": message}))).into_response()
}

/// Rewrites error responses that are not JSON (a body limit's 413, a
/// timeout's 408, axum's 404/405, an extractor's rejection) into the
/// refusal shape; their plain-text bodies are not echoed. Use with
/// `axum::middleware::map_response`, outside the limit and timeout layers.
pub async fn json_refusals(r: Response) -> Response {
    let status = r.status();
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return r;
    }
    let (code, message) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => ("too_large", "the request body is too large"),
        StatusCode::REQUEST_TIMEOUT => ("timeout", "the request took too long"),
        StatusCode::NOT_FOUND => ("not_found", "no such endpoint"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "method not allowed here"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", "send application/json"),
        StatusCode::SERVICE_UNAVAILABLE => ("unavailable", "the service is unavailable"),
        s if s.is_server_error() => ("internal", "internal error"),
        _ => ("malformed", "the request is malformed"),
    };
    // Keep the headers (`Allow`, `Retry-After`, CORS), not the body.
    let (parts, _) = r.into_parts();
    let mut out = refusal(status, code, message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH && name != header::CONTENT_TYPE {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    out
}

/// The span of a request: method and matched route only.
pub fn route_span(req: &Request<Body>) -> tracing::Span {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("-", |m| m.as_str());
    tracing::debug_span!("request", method = %req.method(), route)
}

pub type RouteTraceLayer =
    TraceLayer<SharedClassifier<ServerErrorsAsFailures>, fn(&Request<Body>) -> tracing::Span>;

/// `TraceLayer` with [`route_span`].
pub fn trace_layer() -> RouteTraceLayer {
    TraceLayer::new_for_http().make_span_with(route_span as fn(&Request<Body>) -> tracing::Span)
}

/// CORS for a web client: `["*"]` allows any origin, otherwise the listed
/// ones (entries that are not valid header values are dropped).
pub fn cors(origins: &[String], methods: Vec<Method>, headers: Vec<HeaderName>) -> CorsLayer {
    let c = CorsLayer::new()
        .allow_methods(methods)
        .allow_headers(headers);
    if origins.iter().any(|o| o == "*") {
        c.allow_origin(Any)
    } else {
        let list: Vec<HeaderValue> = origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o).ok())
            .collect();
        c.allow_origin(AllowOrigin::list(list))
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    fn app(origins: &[String]) -> Router {
        Router::new()
            .route("/ok", get(|| async { "fine" }))
            .route(
                "/busy",
                get(|| async {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [(header::RETRY_AFTER, "7")],
                        "slow down",
                    )
                }),
            )
            .route(
                "/own",
                get(|| async { refusal(StatusCode::FORBIDDEN, "own_code", "kept") }),
            )
            .layer(axum::middleware::map_response(json_refusals))
            .layer(cors(origins, vec![Method::GET], vec![header::CONTENT_TYPE]))
            .layer(trace_layer())
    }

    async fn call(app: Router, uri: &str, origin: Option<&str>) -> (StatusCode, Response) {
        let mut b = Request::get(uri);
        if let Some(o) = origin {
            b = b.header(header::ORIGIN, o);
        }
        let r = app.oneshot(b.body(Body::empty()).unwrap()).await.unwrap();
        (r.status(), r)
    }

    async fn body_json(r: Response) -> serde_json::Value {
        let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    #[tokio::test]
    async fn plain_errors_become_refusals_and_the_rest_is_untouched() {
        let any = vec!["*".to_string()];
        let (st, r) = call(app(&any), "/nope", None).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        assert_eq!(body_json(r).await["error"], "not_found");
        let (st, r) = call(app(&any), "/busy", None).await;
        assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "7");
        let v = body_json(r).await;
        assert_eq!(v["error"], "malformed");
        assert!(
            !v.to_string().contains("slow down"),
            "plain bodies are not echoed"
        );
        let (_, r) = call(app(&any), "/own", None).await;
        assert_eq!(body_json(r).await["error"], "own_code");
        let (st, r) = call(app(&any), "/ok", None).await;
        assert_eq!(st, StatusCode::OK);
        let b = axum::body::to_bytes(r.into_body(), 64).await.unwrap();
        assert_eq!(&b[..], b"fine");
    }

    #[tokio::test]
    async fn cors_allows_listed_origins_only() {
        let listed = vec!["https://a.example".to_string()];
        let (_, r) = call(app(&listed), "/ok", Some("https://a.example")).await;
        assert_eq!(
            r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://a.example"
        );
        let (_, r) = call(app(&listed), "/ok", Some("https://b.example")).await;
        assert!(
            r.headers()
                .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
                .is_none()
        );
        let (_, r) = call(app(&["*".into()]), "/ok", Some("https://b.example")).await;
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
    }
}
