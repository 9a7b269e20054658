//! Requests asked for ahead of the walk: the walker's next request and the rest of a quiet
//! run's pages ([`PageWalker::requests_ahead`](super::cursor::PageWalker::requests_ahead)),
//! in flight together while the pass completes and writes the pages before them; their
//! answers, each with its details ([`super::details`]), wait here until the walk takes them,
//! in its own order.
//!
//! An answer is only ever given to the walk for a request it wanted from the moment the
//! request went out until it was taken: whenever the walk's wants change, what it no longer
//! wants is dropped ([`Ahead::want`]), and a request wanted again later goes out again. So
//! a walk that left a run (it fell back, or found an unstable tie order) never reads a page
//! asked before what it read since.
//!
//! How far ahead adapts to the distance: a *window* of requests out or waiting, which doubles
//! (up to [`MAX_WINDOW`]) each time the walk has to wait for an answer still in flight, and
//! shrinks by one each time it takes an answer while others pile up unread. A service next
//! door is read a page or two ahead, as before (asking more would only take the CPU the
//! writer needs); one 100 ms away gets as many pages in flight as its latency hides. Memory
//! is bounded besides by [`MAX_BYTES_AHEAD`]: the answers waiting (their details included)
//! plus, for each request in flight, the largest answer seen yet. The next request always goes out: the walk needs it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::cursor::PageRequest;
use super::details::Fetched;
use super::error::SyncError;

/// The bytes of one walk's pages asked ahead (waiting, or reserved for those in flight).
pub(super) const MAX_BYTES_AHEAD: u64 = 16 * 1024 * 1024;

/// The most requests out or waiting for one walk (a quiet run's longest).
pub(super) const MAX_WINDOW: usize = 64;

/// The window to start with, and the least: the next request and one after it.
const MIN_WINDOW: usize = 2;

/// Answers waiting unread from which the window shrinks: the walk is slower than the service.
const PILED_UP: usize = 2;

/// What a page is taken to weigh before any answer said (a page of 100 calls with their
/// attempts is about this in JSON).
const FIRST_PAGE_BYTES: u64 = 512 * 1024;

/// One request in flight, answering with its ask's number and the request.
type Fetch<'a> =
    Pin<Box<dyn Future<Output = (u64, PageRequest, Result<Fetched, SyncError>)> + Send + 'a>>;

/// Requests in flight ahead of the walk and the answers waiting for it.
pub(super) struct Ahead<'a> {
    in_flight: FuturesUnordered<Fetch<'a>>,
    /// Each request in flight that the walk still wants, by the number of its ask: an
    /// answer whose number is not here was dropped (or asked again since) and is thrown away.
    asked: HashMap<PageRequest, u64>,
    answered: HashMap<PageRequest, (Result<Fetched, SyncError>, u64)>,
    asks: u64,
    /// Bytes of the answers waiting.
    waiting: u64,
    /// The largest page yet, reserved for each request in flight.
    page_bytes: u64,
    /// Requests out or waiting that the walk may have at once.
    window: usize,
}

impl<'a> Ahead<'a> {
    pub(super) fn new() -> Self {
        Ahead {
            in_flight: FuturesUnordered::new(),
            asked: HashMap::new(),
            answered: HashMap::new(),
            asks: 0,
            waiting: 0,
            page_bytes: FIRST_PAGE_BYTES,
            window: MIN_WINDOW,
        }
    }

    /// The walk now wants `wanted`, in its order: what it no longer wants is dropped, and
    /// what it wants and has not asked for goes out (through `fetch`) while the bytes allow;
    /// the first always goes out.
    pub(super) fn want<F>(&mut self, wanted: &[PageRequest], fetch: impl Fn(PageRequest) -> F)
    where
        F: Future<Output = Result<Fetched, SyncError>> + Send + 'a,
    {
        let keep: HashSet<&PageRequest> = wanted.iter().collect();
        self.asked.retain(|request, _| keep.contains(request));
        let dropped: Vec<PageRequest> = self
            .answered
            .keys()
            .filter(|request| !keep.contains(request))
            .copied()
            .collect();
        for request in dropped {
            self.take_answered(&request);
        }
        for (i, request) in wanted.iter().enumerate() {
            if self.asked.contains_key(request) || self.answered.contains_key(request) {
                continue;
            }
            let outstanding = self.asked.len() + self.answered.len();
            if i > 0
                && (outstanding >= self.window || self.bytes() + self.page_bytes > MAX_BYTES_AHEAD)
            {
                break;
            }
            self.asks += 1;
            let ask = self.asks;
            self.asked.insert(*request, ask);
            let (request, fetching) = (*request, fetch(*request));
            self.in_flight
                .push(Box::pin(async move { (ask, request, fetching.await) }));
        }
    }

    /// The answer to `request` if it was asked ahead (waiting for it while the requests in
    /// flight answer); `None` if it was not.
    pub(super) async fn answer(
        &mut self,
        request: &PageRequest,
    ) -> Option<Result<Fetched, SyncError>> {
        if let Some(answer) = self.take_answered(request) {
            if self.answered.len() >= PILED_UP {
                self.window = self.window.saturating_sub(1).max(MIN_WINDOW);
            }
            return Some(answer);
        }
        if !self.asked.contains_key(request) {
            return None;
        }
        // The walk waits on the service: more in flight would have hidden that.
        self.window = (self.window * 2).min(MAX_WINDOW);
        loop {
            let (ask, asked, answer) = self.in_flight.next().await?;
            self.keep(ask, asked, answer);
            if let Some(answer) = self.take_answered(request) {
                return Some(answer);
            }
        }
    }

    /// Keeps the requests in flight answering while the walk does other work (never ends).
    pub(super) async fn drive(&mut self) {
        loop {
            match self.in_flight.next().await {
                Some((ask, asked, answer)) => self.keep(ask, asked, answer),
                None => std::future::pending().await,
            }
        }
    }

    /// Requests in flight (including those the walk no longer wants).
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Keeps every answer already in (for tests: the service answered, the walk is busy).
    #[cfg(test)]
    fn keep_ready(&mut self) {
        use futures::FutureExt;
        while let Some(Some((ask, asked, answer))) = self.in_flight.next().now_or_never() {
            self.keep(ask, asked, answer);
        }
    }

    /// Keeps an answer the walk still wants: its request still asked under this ask's number
    /// (not dropped, nor asked again since).
    fn keep(&mut self, ask: u64, request: PageRequest, answer: Result<Fetched, SyncError>) {
        if self.asked.get(&request) != Some(&ask) {
            return;
        }
        self.asked.remove(&request);
        let bytes = answer.as_ref().map_or(0, weight);
        self.page_bytes = self.page_bytes.max(bytes);
        self.waiting += bytes;
        self.answered.insert(request, (answer, bytes));
    }

    fn take_answered(&mut self, request: &PageRequest) -> Option<Result<Fetched, SyncError>> {
        let (answer, bytes) = self.answered.remove(request)?;
        self.waiting -= bytes;
        Some(answer)
    }

    fn bytes(&self) -> u64 {
        let in_flight = u64::try_from(self.asked.len()).unwrap_or(u64::MAX);
        self.waiting
            .saturating_add(in_flight.saturating_mul(self.page_bytes))
    }
}

/// What an answer weighs: its `Content-Length` (or else its rows at the weight of a first
/// page's row), and its details'.
fn weight(fetched: &Fetched) -> u64 {
    let listed = &fetched.listed;
    let rows = listed.page.data.len() as u64;
    listed
        .bytes
        .unwrap_or(rows.saturating_mul(FIRST_PAGE_BYTES / 100))
        .saturating_add(fetched.detail_bytes())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::api::Listed;
    use crate::service::{CallPage, Timestamp};
    use crate::sync::cursor::Purpose;

    fn page(n: u32) -> PageRequest {
        PageRequest {
            updated_after: Timestamp::from_unix_nanos(0).unwrap(),
            page: n,
            page_size: 100,
            purpose: Purpose::Walk,
        }
    }

    /// Answers tagged with their ask's number (in `served_at`), each `bytes` long.
    fn tagged(asks: &AtomicU64, bytes: u64) -> impl Fn(PageRequest) -> BoxedAnswer + '_ {
        move |_| {
            let n = asks.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move {
                let page: CallPage = serde_json::from_str(r#"{"data": []}"#).unwrap();
                let served_at = Timestamp::from_unix_nanos(i128::from(n) * 1_000_000_000);
                Ok(Fetched::listed_only(Listed {
                    page,
                    served_at,
                    bytes: Some(bytes),
                }))
            })
        }
    }

    type BoxedAnswer = Pin<Box<dyn Future<Output = Result<Fetched, SyncError>> + Send>>;

    fn ask_of(fetched: Option<Result<Fetched, SyncError>>) -> i128 {
        let served_at = fetched.unwrap().unwrap().listed.served_at.unwrap();
        served_at.unix_nanos() / 1_000_000_000
    }

    #[tokio::test]
    async fn an_answer_is_given_only_for_a_request_wanted_since_it_went_out() {
        let asks = AtomicU64::new(0);
        let fetch = tagged(&asks, 1000);
        let mut ahead = Ahead::new();
        ahead.want(&[page(1), page(2), page(3)], &fetch);
        assert_eq!(ask_of(ahead.answer(&page(1)).await), 1);
        // The walk no longer wants page 2 (it fell back), then wants it again: the answer
        // asked before is thrown away, and page 2 goes out anew.
        ahead.want(&[page(3)], &fetch);
        ahead.want(&[page(2), page(3)], &fetch);
        assert_eq!(ask_of(ahead.answer(&page(2)).await), 4);
        assert_eq!(ask_of(ahead.answer(&page(3)).await), 3);
        // Not asked: the caller asks for it.
        assert!(ahead.answer(&page(5)).await.is_none());
        assert_eq!(asks.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn the_window_opens_while_the_walk_waits_and_closes_while_answers_pile_up() {
        let asks = AtomicU64::new(0);
        let fetch = tagged(&asks, 1000);
        let mut ahead = Ahead::new();
        let wanted: Vec<PageRequest> = (1..=40).map(page).collect();
        ahead.want(&wanted, &fetch);
        assert_eq!(
            ahead.in_flight(),
            MIN_WINDOW,
            "a page or two ahead to start with"
        );
        // The walk asks for page 1 before it answered: it waits, and the window doubles.
        assert_eq!(ask_of(ahead.answer(&page(1)).await), 1);
        assert_eq!(ahead.window, 2 * MIN_WINDOW);
        ahead.want(&wanted[1..], &fetch);
        assert_eq!(asks.load(Ordering::SeqCst), 1 + 2 * MIN_WINDOW as u64);
        // The service answers them all while the walk is busy: taking one while as many
        // wait unread shrinks the window by one, and asks one more (not more).
        ahead.keep_ready();
        assert_eq!(ask_of(ahead.answer(&page(2)).await), 2);
        assert_eq!(ahead.window, 2 * MIN_WINDOW - 1);
        ahead.want(&wanted[2..], &fetch);
        assert_eq!(asks.load(Ordering::SeqCst), 1 + 2 * MIN_WINDOW as u64);
    }

    #[tokio::test]
    async fn the_bytes_waiting_and_in_flight_stay_under_the_cap() {
        let asks = AtomicU64::new(0);
        let half = MAX_BYTES_AHEAD / 2;
        let fetch = tagged(&asks, half);
        let mut ahead = Ahead::new();
        ahead.window = MAX_WINDOW;
        ahead.want(&[page(1)], &fetch);
        assert_eq!(ask_of(ahead.answer(&page(1)).await), 1);
        // Pages weigh half the cap now: two may be out (or waiting), not three.
        let wanted: Vec<PageRequest> = (2..=6).map(page).collect();
        ahead.want(&wanted, &fetch);
        assert_eq!(ahead.in_flight(), 2);
        // The next request always goes out, whatever the bytes.
        ahead.want(&[page(9)], &fetch);
        assert_eq!(asks.load(Ordering::SeqCst), 4);
        assert_eq!(ask_of(ahead.answer(&page(9)).await), 4);
    }
}
