//! The bridge's tasks by name: a panic (or an abort outside shutdown) becomes an error naming
//! its task.

use std::collections::HashMap;

use tokio::task::{JoinError, JoinSet};

use super::error::RunError;

/// The names of spawned tasks by id, so that a panic names its task.
#[derive(Default)]
pub struct TaskNames(HashMap<tokio::task::Id, String>);

impl TaskNames {
    pub fn spawn<T: Send + 'static>(&mut self, set: &mut JoinSet<T>, name: String, task: impl Future<Output = T> + Send + 'static) {
        self.0.insert(set.spawn(task).id(), name);
    }

    /// The result of a joined task; a panic (or an abort, outside shutdown) as an error
    /// naming it.
    pub fn joined<T>(&self, joined: Result<(tokio::task::Id, T), JoinError>) -> Result<T, RunError> {
        joined.map(|(_, t)| t).map_err(|e| {
            let task = self.0.get(&e.id()).cloned().unwrap_or_else(|| "unnamed".into());
            let message = if e.is_panic() {
                let payload = e.into_panic();
                payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned()).unwrap_or_default()
            } else {
                "cancelled".into()
            };
            RunError::TaskPanicked { task, message }
        })
    }

    /// Waits for the first of `set`'s tasks to panic (tasks that end normally are let go);
    /// never returns while none does.
    pub async fn first_panic<T: 'static>(&self, set: &mut JoinSet<T>) -> RunError {
        loop {
            match set.join_next_with_id().await {
                Some(joined) => {
                    if let Err(e) = self.joined(joined) {
                        return e;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_an_error_naming_it_and_tasks_that_end_are_let_go() {
        let mut names = TaskNames::default();
        let mut set = JoinSet::new();
        names.spawn(&mut set, "ends".into(), async {});
        names.spawn(&mut set, "watch of configmaps".into(), async {
            tokio::task::yield_now().await;
            panic!("overflow when adding duration to instant");
        });
        match names.first_panic(&mut set).await {
            RunError::TaskPanicked { task, message } => {
                assert_eq!(task, "watch of configmaps");
                assert_eq!(message, "overflow when adding duration to instant");
            }
            other => panic!("expected a panic, got {other}"),
        }
        names.spawn(&mut set, "delivery".into(), async { panic!("{}", String::from("formatted")) });
        let e = names.joined(set.join_next_with_id().await.unwrap()).unwrap_err().to_string();
        assert!(e.contains("the task `delivery` panicked (formatted)"), "{e}");
        let pending = tokio::time::timeout(Duration::from_millis(50), names.first_panic(&mut set)).await;
        assert!(pending.is_err(), "no task left: waits");
    }
}
