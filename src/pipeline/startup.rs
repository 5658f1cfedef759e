//! The start-up steps `run` takes before anything is watched, in one list shared with
//! `deltaship check`: `run` stops at the first failure, `check` reports every step.

use std::sync::Arc;

use kube::Client;

use super::error::RunError;
use crate::config::Config;
use crate::plan::{self, Scope};
use crate::watch::{access, client, discovery};

/// What the steps establish: a client and the watch scopes.
pub struct Started {
    pub client: Client,
    pub scopes: Vec<Arc<Scope>>,
}

/// Connects to the API server, resolves every resource by discovery, plans the watch
/// scopes and checks list and watch access on each, telling `report` what each step found
/// (every resource and every scope, not only the first failure); the first failure ends it.
pub async fn start(config: &Config, report: &mut impl FnMut(Result<&str, &RunError>)) -> Result<Started, RunError> {
    let (client, api_server) = one(report, client::connect(&config.kubernetes).await.map(|c| (c, None)).map_err(RunError::from))?;
    let version = client.apiserver_version().await.map_err(RunError::ApiServer);
    one(report, version.map(|v| ((), Some(format!("API server reachable, version {}", v.git_version)))))?;
    let served = one(report, discovery::discover(client.clone()).await.map(|s| (s, None)).map_err(RunError::from))?;
    let resources = all(
        report,
        config.resources.iter().enumerate().map(|(i, rc)| {
            served.resolve(i, rc).map_err(RunError::from).map(|r| {
                let scope = if r.namespaced { "namespaced" } else { "cluster-scoped" };
                let said = format!("resources[{i}]: {} resolves to {} ({scope})", rc.kind, r.label());
                (r, said)
            })
        }),
    )?;
    let scopes = one(report, plan::scopes(config, &resources, &api_server).map(|s| (s, None)).map_err(RunError::from))?;
    let mut checks = Vec::new();
    for s in &scopes {
        checks.push(access::check(&client, s).await.map(|()| ((), format!("list and watch allowed on {}", s.describe()))).map_err(RunError::from));
    }
    all(report, checks)?;
    Ok(Started { client, scopes })
}

/// Reports one step: its failure, or what it has to say when it passed.
fn one<T>(report: &mut impl FnMut(Result<&str, &RunError>), r: Result<(T, Option<String>), RunError>) -> Result<T, RunError> {
    match r {
        Ok((v, said)) => {
            if let Some(s) = said {
                report(Ok(&s));
            }
            Ok(v)
        }
        Err(e) => {
            report(Err(&e));
            Err(e)
        }
    }
}

/// Reports every outcome of a list of checks; their values, or the first failure.
fn all<T>(report: &mut impl FnMut(Result<&str, &RunError>), checks: impl IntoIterator<Item = Result<(T, String), RunError>>) -> Result<Vec<T>, RunError> {
    let mut values = Vec::new();
    let mut first = None;
    for r in checks {
        match r {
            Ok((v, said)) => {
                report(Ok(&said));
                values.push(v);
            }
            Err(e) => {
                report(Err(&e));
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(values), Err)
}
