//! The nemesis's bounded polls: a condition looked at every 50 ms until it holds or the seed
//! is done.

use std::time::Duration;

/// Polls `f` every 50 ms until it gives something or `until` resolves.
pub(super) async fn poll<T>(
    until: impl Future<Output = ()>,
    f: impl Fn() -> Option<T>,
) -> Option<T> {
    poll_async(until, || std::future::ready(f())).await
}

/// Awaits `f` every 50 ms until it gives something or `until` resolves.
pub(super) async fn poll_async<T, F: Future<Output = Option<T>>>(
    until: impl Future<Output = ()>,
    f: impl Fn() -> F,
) -> Option<T> {
    let mut until = std::pin::pin!(until);
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        tokio::select! {
            () = &mut until => return None,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}
