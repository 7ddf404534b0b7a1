//! What the document's publishes cost: each `publish` and each message of
//! a `publishBatch` at the price of an HTTP publish of it (its channel and
//! the length of its `data` as compact JSON, which is what the mutation
//! publishes), read from the document's arguments without building their
//! values. A variable's length and a batch variable's price are measured
//! once however many aliases name it, so pricing stays linear in the
//! document and its variables (a 1 MiB variable named by 500 aliases is
//! measured once, not serialized 500 times).

use std::collections::HashMap;

use async_graphql::parser::types::Field;
use async_graphql_value::{ConstValue, Name, Value};

use super::PublishPrice;
use super::args::{Args, items};

/// Bytes of `v` as compact JSON, without building the text.
pub fn json_len(v: &ConstValue) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// The measures of one operation's publishes. Its maps hold one entry
/// per variable of the operation at most.
pub(super) struct Publishes<'a> {
    /// JSON length of a variable's value.
    lens: HashMap<&'a Name, usize>,
    /// Price of a variable holding a batch's messages (or one message).
    batches: HashMap<&'a Name, u64>,
    items: HashMap<&'a Name, u64>,
}

impl<'a> Publishes<'a> {
    pub fn new() -> Publishes<'a> {
        Publishes {
            lens: HashMap::new(),
            batches: HashMap::new(),
            items: HashMap::new(),
        }
    }

    /// `publish(channel:, data:)`.
    pub fn publish(&mut self, args: &Args<'a>, f: &'a Field, price: &dyn PublishPrice) -> u64 {
        let channel = f.get_argument("channel").map(|v| &v.node);
        let data = f.get_argument("data").map(|v| &v.node);
        self.message(args, channel, data, price)
    }

    /// `publishBatch(messages:)`: the sum of its messages' prices; one
    /// message given without a list is a list of one, as the executor
    /// coerces it.
    pub fn batch(&mut self, args: &Args<'a>, f: &'a Field, price: &dyn PublishPrice) -> u64 {
        match f.get_argument("messages").map(|v| &v.node) {
            None | Some(Value::Null) => 0,
            Some(Value::Variable(name)) => {
                if let Some(p) = self.batches.get(name) {
                    return *p;
                }
                let p = args.variable(name).map_or(0, |v| {
                    items(v)
                        .iter()
                        .fold(0u64, |sum, m| sum.saturating_add(const_item(m, price)))
                });
                self.batches.insert(name, p);
                p
            }
            Some(Value::List(list)) => list
                .iter()
                .fold(0u64, |sum, m| sum.saturating_add(self.item(args, m, price))),
            Some(one) => self.item(args, one, price),
        }
    }

    /// One `PublishInput` written in the document.
    fn item(&mut self, args: &Args<'a>, v: &'a Value, price: &dyn PublishPrice) -> u64 {
        match v {
            Value::Variable(name) => {
                if let Some(p) = self.items.get(name) {
                    return *p;
                }
                let p = args.variable(name).map_or(0, |m| const_item(m, price));
                self.items.insert(name, p);
                p
            }
            Value::Object(o) => {
                let channel = o.get("channel");
                let data = o.get("data");
                self.message(args, channel, data, price)
            }
            // Not a PublishInput: validation refuses it.
            _ => price.price("", 4),
        }
    }

    fn message(
        &mut self,
        args: &Args<'a>,
        channel: Option<&'a Value>,
        data: Option<&'a Value>,
        price: &dyn PublishPrice,
    ) -> u64 {
        let channel = match channel {
            Some(Value::String(s)) => s.as_str(),
            Some(Value::Variable(name)) => match args.variable(name) {
                Some(ConstValue::String(s)) => s.as_str(),
                _ => "",
            },
            _ => "",
        };
        let len = data.map_or(4, |d| self.len(args, d));
        price.price(channel, len)
    }

    /// The JSON length of `v` with its variables' values, each variable
    /// measured once.
    fn len(&mut self, args: &Args<'a>, v: &'a Value) -> usize {
        match v {
            Value::Variable(name) => {
                if let Some(n) = self.lens.get(name) {
                    return *n;
                }
                let n = args.variable(name).map_or(4, json_len);
                self.lens.insert(name, n);
                n
            }
            Value::List(list) => list
                .iter()
                .fold(2 + list.len().saturating_sub(1), |sum, item| {
                    sum.saturating_add(self.len(args, item))
                }),
            Value::Object(o) => o
                .iter()
                .fold(2 + o.len().saturating_sub(1), |sum, (key, item)| {
                    let key = json_len(&ConstValue::String(key.to_string()));
                    sum.saturating_add(key + 1)
                        .saturating_add(self.len(args, item))
                }),
            scalar => json_len(&scalar.clone().into_const().unwrap_or(ConstValue::Null)),
        }
    }
}

/// One message given as a value (from a variable).
fn const_item(m: &ConstValue, price: &dyn PublishPrice) -> u64 {
    match m {
        ConstValue::Object(o) => {
            let channel = match o.get("channel") {
                Some(ConstValue::String(s)) => s.as_str(),
                _ => "",
            };
            let len = o.get("data").map_or(4, json_len);
            price.price(channel, len)
        }
        _ => price.price("", 4),
    }
}
