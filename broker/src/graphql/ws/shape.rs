//! A `messages` subscription's selection set, compiled once when it
//! starts into the JSON its every `next` message carries, with two holes:
//! the message's `seq` and its `data`. A delivery then fills the holes: no
//! executor, no JSON parsing.
//!
//! A `next` message is two pieces: what is the subscription's own (the
//! frame's header, `{"type":"next","id":..,"payload":{` and, on the first
//! message, its `extensions`), and the body, `"data":{..}}}`, which only
//! the selection, the channel and the message decide. So one publish's
//! body is rendered once for every subscription with the same selection
//! on the channel ([`Shape::body_key`], shared through the hub's
//! [`Renders`](crate::hub::Renders)), and each subscription queues its own
//! head ([`Shape::render_head`], kept while the length stays the same)
//! and the shared body as one queue entry written as two slices: nothing
//! allocated or copied per socket, and the kernel copies the body from
//! one hot buffer instead of from a thousand cold ones. The first `next`,
//! with `extensions`, is one frame ([`Shape::render_around`]). Large
//! messages are queued in parts around the hub's own bytes instead
//! ([`Shape::render`]: `data` is not copied).
//!
//! The selection is collected as GraphQL's CollectFields does (aliases,
//! fields selected twice merged under one response key in first-seen
//! order, fragments and inline fragments on `Message`, `@skip` and
//! `@include` with literals or variables: `pricing::collect`); validation
//! has already refused anything else, and the pricer a field selected
//! under two keys (a message is rendered once per subscription).

use std::fmt::Write as _;

use async_graphql::parser::types::{ExecutableDocument, OperationDefinition, SelectionSet};
use async_graphql_value::Variables;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::graphql::pricing::{Args, Collected, collect};
use crate::protocol::wire;

/// One piece of the `data` object's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    Seq,
    Data,
}

/// What every `next` message of one subscription carries.
#[derive(Debug, Clone)]
pub struct Shape {
    /// `{"type":"next","id":..,"payload":{`.
    head: String,
    /// The `data` object, holes included.
    parts: Vec<Part>,
    /// The exact text of `parts` with each hole as a byte JSON text never
    /// holds raw (0: `seq`, 1: `data`): two subscriptions render the same
    /// body for a message exactly when their keys are equal.
    body_key: Arc<[u8]>,
    /// Everything after the last `data` hole when it holds no `seq`, the
    /// message's closing braces included: built once, shared by every
    /// message (`None`: rendered each time).
    tail: Option<Bytes>,
}

/// The closing of `data`, `payload` and the message.
const CLOSE: &str = "}}}";

/// What opens the body, after the head (and `extensions`).
const DATA: &str = r#""data":{"#;

impl Shape {
    /// The shape of operation `op` of `doc` for subscription `id` on
    /// `channel`, with `variables` deciding `@skip`/`@include`.
    pub fn compile(
        doc: &ExecutableDocument,
        op: &OperationDefinition,
        variables: &Variables,
        id: &str,
        channel: &str,
    ) -> Shape {
        let ctx = Ctx {
            doc,
            args: Args::new(variables, op),
            channel,
        };
        let mut parts = vec![Part::Lit(String::new())];
        let roots = ctx.collect(&[&op.selection_set.node]);
        for (i, (key, name, sets)) in roots.iter().enumerate() {
            lit(&mut parts, if i == 0 { "" } else { "," });
            lit(&mut parts, &json_string(key));
            lit(&mut parts, ":");
            match name.as_str() {
                "__typename" => lit(&mut parts, "\"Subscription\""),
                _ => ctx.message(&mut parts, sets),
            }
        }
        let head = format!(r#"{{"type":"next","id":{},"payload":{{"#, json_string(id));
        let last_data = parts.iter().rposition(|p| *p == Part::Data);
        let tail = match last_data {
            Some(at) if !parts[at..].contains(&Part::Seq) => {
                let mut t = String::new();
                for p in &parts[at + 1..] {
                    if let Part::Lit(s) = p {
                        t.push_str(s);
                    }
                }
                t.push_str(CLOSE);
                Some(Bytes::from(t))
            }
            _ => None,
        };
        let mut body_key = Vec::new();
        for p in &parts {
            match p {
                Part::Lit(s) => body_key.extend_from_slice(s.as_bytes()),
                Part::Seq => body_key.push(0),
                Part::Data => body_key.push(1),
            }
        }
        Shape {
            head,
            parts,
            body_key: body_key.into(),
            tail,
        }
    }

    /// What decides [`Shape::render_body`] besides the message (equal
    /// keys, equal bodies).
    pub fn body_key(&self) -> &Arc<[u8]> {
        &self.body_key
    }

    /// The shared end of the `next` message for `seq` with `data`:
    /// `"data":{..}}}`, the same for every subscription with this
    /// [`Shape::body_key`].
    pub fn render_body(&self, seq: u64, data: &[u8]) -> Bytes {
        let mut digits = itoa::Buffer::new();
        let seq_text = digits.format(seq);
        let len = DATA.len() + self.parts_len(seq_text.len(), data.len()) + CLOSE.len();
        let mut buf = BytesMut::with_capacity(len);
        buf.put_slice(DATA.as_bytes());
        self.put_parts(&mut buf, seq_text, data);
        debug_assert_eq!(buf.len(), len);
        buf.freeze()
    }

    /// The whole `next` frame of this subscription around a `body`
    /// ([`Shape::render_body`]): its own head, then a copy of the body.
    pub fn render_around(&self, extensions: Option<&str>, body: &[u8]) -> Bytes {
        let own = self.own_len(extensions);
        let len = own + body.len();
        let mut buf = BytesMut::with_capacity(header_len(len) + len);
        wire::put_text_header(&mut buf, len);
        self.put_own(&mut buf, extensions);
        buf.put_slice(body);
        debug_assert_eq!(buf.len(), buf.capacity());
        buf.freeze()
    }

    /// The header and head of this subscription's `next` frame around a
    /// `body` of `body_len` bytes, without `extensions`: queued before a
    /// body shared by the fan-out ([`Shape::render_body`]), it makes the
    /// same bytes as [`Shape::render_around`] with neither the body
    /// copied nor, as long as `body_len` stays the same (the sink keeps
    /// it), anything allocated per message.
    pub fn render_head(&self, body_len: usize) -> Bytes {
        let len = self.head.len() + body_len;
        let mut buf = BytesMut::with_capacity(header_len(len) + self.head.len());
        wire::put_text_header(&mut buf, len);
        buf.put_slice(self.head.as_bytes());
        debug_assert_eq!(buf.len(), buf.capacity());
        buf.freeze()
    }

    /// The `next` message for `seq` with `data` (the JSON text of the
    /// message's `data`, a slice of the hub's frame), in parts: header and
    /// head first. `extensions` (a JSON object's text) goes in the payload
    /// before `data`, where `wire::conflated` finds it.
    pub fn render(&self, extensions: Option<&str>, seq: u64, data: &Bytes) -> Vec<Bytes> {
        let mut digits = itoa::Buffer::new();
        let seq_text = digits.format(seq);
        let len = self.len(extensions, seq_text.len(), data.len());
        let mut out = Vec::with_capacity(3);
        let mut buf = BytesMut::with_capacity(self.first_len(extensions, seq_text.len()) + 10);
        wire::put_text_header(&mut buf, len);
        self.put_own(&mut buf, extensions);
        buf.put_slice(DATA.as_bytes());
        let last = if self.tail.is_some() {
            self.parts.iter().rposition(|p| *p == Part::Data)
        } else {
            None
        };
        for (i, p) in self.parts.iter().enumerate() {
            match p {
                Part::Lit(s) => buf.put_slice(s.as_bytes()),
                Part::Seq => buf.put_slice(seq_text.as_bytes()),
                Part::Data => {
                    out.push(std::mem::take(&mut buf).freeze());
                    out.push(data.clone());
                    if Some(i) == last {
                        out.extend(self.tail.clone());
                        return out;
                    }
                }
            }
        }
        buf.put_slice(CLOSE.as_bytes());
        out.push(buf.freeze());
        out.retain(|b| !b.is_empty());
        out
    }

    /// [`Shape::render`] as one frame, written in one buffer: what a
    /// conflating channel queues (it replaces whole frames).
    pub fn render_whole(&self, extensions: Option<&str>, seq: u64, data: &[u8]) -> Bytes {
        let mut digits = itoa::Buffer::new();
        let seq_text = digits.format(seq);
        let len = self.len(extensions, seq_text.len(), data.len());
        let mut buf = BytesMut::with_capacity(header_len(len) + len);
        wire::put_text_header(&mut buf, len);
        self.put_own(&mut buf, extensions);
        buf.put_slice(DATA.as_bytes());
        self.put_parts(&mut buf, seq_text, data);
        debug_assert_eq!(buf.len(), buf.capacity());
        buf.freeze()
    }

    /// The `data` object's inside with its holes filled, and the closing.
    fn put_parts(&self, buf: &mut BytesMut, seq_text: &str, data: &[u8]) {
        let last = if self.tail.is_some() {
            self.parts.iter().rposition(|p| *p == Part::Data)
        } else {
            None
        };
        for (i, p) in self.parts.iter().enumerate() {
            match p {
                Part::Lit(s) => buf.put_slice(s.as_bytes()),
                Part::Seq => buf.put_slice(seq_text.as_bytes()),
                Part::Data => {
                    buf.put_slice(data);
                    if let (Some(tail), true) = (&self.tail, Some(i) == last) {
                        buf.put_slice(tail);
                        return;
                    }
                }
            }
        }
        buf.put_slice(CLOSE.as_bytes());
    }

    /// The head and `extensions`: what is this subscription's own.
    fn put_own(&self, buf: &mut BytesMut, extensions: Option<&str>) {
        buf.put_slice(self.head.as_bytes());
        if let Some(x) = extensions {
            buf.put_slice(br#""extensions":"#);
            buf.put_slice(x.as_bytes());
            buf.put_u8(b',');
        }
    }

    /// The payload's length.
    fn len(&self, extensions: Option<&str>, seq: usize, data: usize) -> usize {
        self.head_len(extensions) + self.parts_len(seq, data) + CLOSE.len()
    }

    /// The `data` object's inside, holes filled.
    fn parts_len(&self, seq: usize, data: usize) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Lit(s) => s.len(),
                Part::Seq => seq,
                Part::Data => data,
            })
            .sum()
    }

    /// The subscription's own part ([`Shape::put_own`]).
    fn own_len(&self, extensions: Option<&str>) -> usize {
        self.head.len() + extensions.map_or(0, |x| r#""extensions":,"#.len() + x.len())
    }

    /// Everything before the `data` object's inside.
    fn head_len(&self, extensions: Option<&str>) -> usize {
        self.own_len(extensions) + DATA.len()
    }

    /// The first part's length (the buffer allocated per message).
    fn first_len(&self, extensions: Option<&str>, seq: usize) -> usize {
        let upto: usize = self
            .parts
            .iter()
            .take_while(|p| **p != Part::Data)
            .map(|p| match p {
                Part::Lit(s) => s.len(),
                _ => seq,
            })
            .sum();
        self.head_len(extensions) + upto + CLOSE.len()
    }
}

/// How long `wire::put_text_header`'s header for a `len`-byte payload is
/// (a buffer sized exactly becomes a `Bytes` without another allocation).
fn header_len(len: usize) -> usize {
    if len < 126 {
        2
    } else if len <= usize::from(u16::MAX) {
        4
    } else {
        10
    }
}

/// Appends literal text, joining it to a literal before it.
fn lit(parts: &mut Vec<Part>, s: &str) {
    match parts.last_mut() {
        Some(Part::Lit(l)) => l.push_str(s),
        _ => parts.push(Part::Lit(s.to_owned())),
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

struct Ctx<'a> {
    doc: &'a ExecutableDocument,
    args: Args<'a>,
    channel: &'a str,
}

impl<'a> Ctx<'a> {
    /// The fields of `sets` by response key, in first-seen order, as the
    /// pricer collects them (`pricing::collect`).
    fn collect(&self, sets: &[&'a SelectionSet]) -> Vec<Collected<'a>> {
        collect(self.doc, &self.args, sets)
    }

    /// A `Message` object: `{"k":..,..}` with its holes.
    fn message(&self, parts: &mut Vec<Part>, sets: &[&'a SelectionSet]) {
        lit(parts, "{");
        for (i, (key, name, _)) in self.collect(sets).iter().enumerate() {
            let mut s = String::new();
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{}:", json_string(key));
            lit(parts, &s);
            match name.as_str() {
                "channel" => lit(parts, &json_string(self.channel)),
                "seq" => parts.push(Part::Seq),
                "data" => parts.push(Part::Data),
                "__typename" => lit(parts, "\"Message\""),
                // Not a field of Message: validation refused the document.
                _ => lit(parts, "null"),
            }
        }
        lit(parts, "}");
    }
}

mod presence;

pub use presence::PresenceShape;

#[cfg(test)]
mod tests;
