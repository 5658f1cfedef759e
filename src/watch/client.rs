//! The Kubernetes client: a kubeconfig (file and context as configured) or in-cluster, its
//! requests counted.

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::requests::CountRequests;

use crate::config::KubernetesConfig;

#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    #[error("cannot read kubeconfig {path}: {source}; fix kubernetes.kubeconfig or KUBECONFIG")]
    Kubeconfig { path: String, source: kube::config::KubeconfigError },
    #[error("no usable Kubernetes credentials: {0}; set KUBECONFIG, kubernetes.kubeconfig, or run in a pod with a service account")]
    Infer(String),
    #[error("cannot create the Kubernetes client: {0}")]
    Create(#[source] kube::Error),
}

/// A client, and the API server's URL (the `source` of Knative-shaped events).
pub async fn connect(cfg: &KubernetesConfig) -> Result<(Client, String), ApiClientError> {
    let options = KubeConfigOptions { context: cfg.context.clone(), ..Default::default() };
    let config = match &cfg.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ApiClientError::Kubeconfig { path: path.display().to_string(), source })?;
            Config::from_custom_kubeconfig(kc, &options).await.map_err(|source| ApiClientError::Kubeconfig { path: path.display().to_string(), source })?
        }
        None if cfg.context.is_some() => Config::from_kubeconfig(&options).await.map_err(|e| ApiClientError::Infer(e.to_string()))?,
        None => Config::infer().await.map_err(|e| ApiClientError::Infer(e.to_string()))?,
    };
    let url = config.cluster_url.to_string().trim_end_matches('/').to_string();
    let client = ClientBuilder::try_from(config).map_err(ApiClientError::Create)?.with_layer(&CountRequests).build();
    Ok((client, url))
}
