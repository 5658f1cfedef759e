//! Counts the Kubernetes client's requests to the API server by verb and status code
//! (`deltaship_kube_requests_total`), as a layer of the client's service stack.

use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response, Uri};
use tower::{Layer, Service};

use crate::telemetry::meters::RequestMeters;

/// The layer: wraps the client's HTTP service in [`Counted`].
#[derive(Debug, Clone, Copy)]
pub struct CountRequests;

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted(inner)
    }
}

#[derive(Debug, Clone)]
pub struct Counted<S>(S);

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    // Boxed: one allocation per request, and requests are few (lists, watch starts,
    // leases), never one per event.
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = verb(request.method(), request.uri());
        self.0
            .call(request)
            .inspect(move |answer| {
                RequestMeters.answered(verb, answer.as_ref().ok().map(|r| r.status().as_u16()));
            })
            .boxed()
    }
}

/// The Kubernetes verb of a request, from its method and path: a GET names one object when
/// a name follows the resource, a collection (a list, or a watch with `watch=true`)
/// otherwise; paths without a resource (/api, /apis/apps/v1, /version) are discovery.
fn verb(method: &Method, uri: &Uri) -> &'static str {
    let path = uri.path().trim_matches('/');
    let mut segments: Vec<&str> = path.split('/').collect();
    // The resource path after the group version: /api/v1/… or /apis/<group>/<version>/….
    let skip = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return if *method == Method::GET { "discovery" } else { "other" },
    };
    segments.drain(..skip.min(segments.len()));
    // namespaces/<ns>/<resource>…, but namespaces or namespaces/<name> alone are Namespaces.
    if segments.first() == Some(&"namespaces") && segments.len() > 2 {
        segments.drain(..2);
    }
    let names_one = segments.len() > 1;
    match *method {
        Method::GET if segments.is_empty() => "discovery",
        Method::GET if uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1")) => "watch",
        Method::GET if names_one => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> &'static str {
        verb(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_named_by_the_kubernetes_verb() {
        assert_eq!(of(Method::GET, "/api/v1/namespaces/shop/configmaps?limit=500"), "list");
        assert_eq!(of(Method::GET, "/apis/apps/v1/deployments?watch=true&resourceVersion=10&allowWatchBookmarks=true"), "watch");
        assert_eq!(of(Method::GET, "/apis/apps/v1/namespaces/shop/deployments/web"), "get");
        assert_eq!(of(Method::GET, "/api/v1/namespaces"), "list");
        assert_eq!(of(Method::GET, "/api/v1/namespaces/shop"), "get");
        assert_eq!(of(Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/ops/leases/deltaship"), "update");
        assert_eq!(of(Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"), "create");
        assert_eq!(of(Method::PATCH, "/api/v1/namespaces/shop/configmaps/a"), "patch");
        assert_eq!(of(Method::DELETE, "/api/v1/namespaces/shop/configmaps/a"), "delete");
        for discovery in ["/api", "/apis", "/apis/apps/v1", "/api/v1", "/version", "/openapi/v3"] {
            assert_eq!(of(Method::GET, discovery), "discovery", "{discovery}");
        }
    }
}
