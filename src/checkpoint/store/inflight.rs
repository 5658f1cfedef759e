//! Writes with a window of acknowledgements outstanding: records go out in order without
//! waiting for each one's acknowledgement (one round trip per record would take minutes at
//! 100k records), and the write ends once every acknowledgement came back.

use std::collections::VecDeque;
use std::time::Duration;

/// How long a write may make no progress (no record taken, no acknowledgement) before it
/// fails: the caller keeps the records and writes them again on its next interval.
pub const STALL: Duration = Duration::from_secs(30);

/// Why a write stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop<E> {
    /// Nothing moved for `STALL`.
    Stalled,
    /// Sending or acknowledging a record failed.
    Failed(E),
}

/// Sends `items` in order, each through `send` (which resolves once the record is taken
/// and returns its acknowledgement), with at most `window` acknowledgements outstanding,
/// and waits for all of them.
pub async fn in_order<T, S, A, E>(items: impl IntoIterator<Item = T>, window: usize, mut send: impl FnMut(T) -> S) -> Result<(), Stop<E>>
where
    S: Future<Output = Result<A, E>>,
    A: Future<Output = Result<(), E>>,
{
    let mut acks = VecDeque::with_capacity(window);
    for item in items {
        if acks.len() >= window
            && let Some(oldest) = acks.pop_front()
        {
            step(oldest).await?;
        }
        acks.push_back(step(send(item)).await?);
    }
    for ack in acks {
        step(ack).await?;
    }
    Ok(())
}

async fn step<R, E>(f: impl Future<Output = Result<R, E>>) -> Result<R, Stop<E>> {
    match tokio::time::timeout(STALL, f).await {
        Ok(r) => r.map_err(Stop::Failed),
        Err(_) => Err(Stop::Stalled),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// What the sends and acknowledgements did: the order of each, and the most
    /// acknowledgements outstanding at once.
    #[derive(Default)]
    struct Seen {
        sent: Vec<u32>,
        acked: Vec<u32>,
        most_outstanding: usize,
    }

    #[tokio::test(start_paused = true)]
    async fn records_go_out_in_order_within_the_window_and_all_are_acknowledged() {
        let seen = &RefCell::new(Seen::default());
        let sent = in_order(0..10u32, 3, |i| async move {
            let mut s = seen.borrow_mut();
            s.sent.push(i);
            s.most_outstanding = s.most_outstanding.max(s.sent.len() - s.acked.len());
            drop(s);
            Ok::<_, ()>(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                seen.borrow_mut().acked.push(i);
                Ok(())
            })
        })
        .await;
        assert_eq!(sent, Ok(()));
        let s = seen.take();
        assert_eq!(s.sent, (0..10).collect::<Vec<_>>());
        assert_eq!(s.acked, (0..10).collect::<Vec<_>>(), "every acknowledgement awaited");
        assert_eq!(s.most_outstanding, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_acknowledgement_fails_the_write() {
        let sent = in_order(0..5u32, 2, |i| async move { Ok(async move { if i == 3 { Err(i) } else { Ok(()) } }) }).await;
        assert_eq!(sent, Err(Stop::Failed(3)));
        let refused = in_order(0..5u32, 2, |i| async move { if i == 1 { Err(i) } else { Ok(async { Ok(()) }) } }).await;
        assert_eq!(refused, Err(Stop::Failed(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_acknowledgement_that_never_comes_stalls_the_write_after_the_bound() {
        let start = tokio::time::Instant::now();
        let sent = in_order(0..5u32, 2, |i| async move { Ok::<_, ()>(async move { if i == 2 { futures::future::pending().await } else { Ok(()) } }) }).await;
        assert_eq!(sent, Err(Stop::Stalled));
        assert_eq!(start.elapsed(), STALL);
    }
}
