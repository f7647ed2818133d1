//! Server-sent events: a channel of JSON events turned into an SSE body (`data: {…}` per
//! event, `data: [DONE]` last), as OpenAI's streaming routes send them. Dropping the body
//! (the client went away) closes the channel, which the generating thread notices on its
//! next send and stops.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use tokio::sync::mpsc;

/// One item of a stream: a JSON object, or the end marker.
pub enum Item {
    Json(serde_json::Value),
    /// OpenAI's `/v1/responses` events carry an `event:` name.
    Named(&'static str, serde_json::Value),
    Done,
}

fn to_event(item: Item) -> Event {
    match item {
        Item::Json(v) => Event::default().data(v.to_string()),
        Item::Named(name, v) => Event::default().event(name).data(v.to_string()),
        Item::Done => Event::default().data("[DONE]"),
    }
}

fn events(rx: mpsc::Receiver<Item>) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (Ok(to_event(item)), rx))
    })
}

/// The SSE response reading `rx` until its sender is dropped.
pub fn response(rx: mpsc::Receiver<Item>) -> Response {
    Sse::new(events(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}
