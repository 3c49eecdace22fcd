//! The shared head-deadline timer on tokio's paused clock: deadlines fire on time and
//! in order, a dropped one leaves the table, and the watcher's one sleep is set again
//! only for an earlier deadline.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::Timer;
use tokio::time::Instant;

use super::HeaderTimer;

/// Polls `sleep` once (registering it), expecting it to wait.
fn poll_once(sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Pending);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_fires_when_it_passes_and_not_before() {
    let (timer, _watcher) = HeaderTimer::start();
    let start = Instant::now();
    timer.sleep(Duration::from_secs(30)).await;
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(30), "fired early: {waited:?}");
    assert!(
        waited < Duration::from_millis(30_010),
        "fired late: {waited:?}"
    );
    assert_eq!(timer.state(), (0, None), "nothing left waiting");
}

#[tokio::test(start_paused = true)]
async fn deadlines_fire_in_order_whatever_order_they_came_in() {
    let (timer, _watcher) = HeaderTimer::start();
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The later ones first, so the earlier ones re-arm the watcher.
    for secs in [3u64, 2, 1] {
        let sleep = timer.sleep(Duration::from_secs(secs));
        let tx = tx.clone();
        tokio::spawn(async move {
            sleep.await;
            tx.send((secs, start.elapsed())).unwrap();
        });
    }
    drop(tx);
    let mut fired = Vec::new();
    while let Some(f) = rx.recv().await {
        fired.push(f);
    }
    assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 2, 3]);
    for (secs, at) in fired {
        let due = Duration::from_secs(secs);
        assert!(
            at >= due && at < due + Duration::from_millis(10),
            "{secs} s fired at {at:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_deadline_leaves_the_table() {
    let (timer, _watcher) = HeaderTimer::start();
    let mut sleep = timer.sleep(Duration::from_secs(30));
    assert_eq!(
        timer.state().0,
        0,
        "a deadline enters the table when polled"
    );
    poll_once(&mut sleep);
    assert_eq!(timer.state().0, 1);
    drop(sleep);
    assert_eq!(timer.state().0, 0);
}

#[tokio::test(start_paused = true)]
async fn the_watcher_is_set_again_only_for_an_earlier_deadline() {
    let (timer, _watcher) = HeaderTimer::start();
    let now = timer.now();
    let mut first = timer.sleep_until(now + Duration::from_secs(30));
    poll_once(&mut first);
    let armed = timer.state().1;
    assert_eq!(armed, Some(now + Duration::from_secs(30)));
    // A later deadline (the next request's, on any connection) changes nothing.
    let mut later = timer.sleep_until(now + Duration::from_secs(31));
    poll_once(&mut later);
    assert_eq!(timer.state(), (2, armed));
    // The earlier one leaving does not re-arm either: the watcher wakes at 30 s,
    // finds nothing due, and sleeps to 31 s.
    drop(first);
    assert_eq!(timer.state(), (1, armed));
    // An earlier deadline does.
    let mut earlier = timer.sleep_until(now + Duration::from_secs(5));
    poll_once(&mut earlier);
    assert_eq!(timer.state(), (2, Some(now + Duration::from_secs(5))));
    drop((later, earlier));
    // With nothing waiting, the watcher stops sleeping once its sleep ends.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(timer.state(), (0, None));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_passed_is_ready_at_once() {
    let (timer, _watcher) = HeaderTimer::start();
    let mut sleep = timer.sleep_until(timer.now() - Duration::from_millis(1));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
    assert_eq!(timer.state(), (0, None));
}
