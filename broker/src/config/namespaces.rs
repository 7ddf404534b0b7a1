//! `[namespaces.NAME]`: how a namespace's messages are kept for a reader
//! that falls behind (§11). A channel's namespace is the part of its name
//! before the first `:`.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

/// How messages to a slow reader are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Above the high-water mark messages are dropped, counted and
    /// reported with `slow_consumer`; the client recovers with `since`.
    #[default]
    Queue,
    /// An unsent message is replaced by a newer one with the same
    /// conflation key: a slow reader gets the latest value per key.
    Conflate,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NamespaceSection {
    pub delivery: Delivery,
    /// A JSON pointer into `data` (`"/user"`); none: the whole channel is
    /// one key.
    pub conflation_key: Option<String>,
    /// Who is subscribed is tracked and readable (§13).
    pub presence: bool,
    /// Subscribers get `presence_diff` frames (§13).
    pub join_leave: bool,
    /// Connections a channel may hold, cluster-wide; one more subscribe is
    /// refused with `presence_full`.
    pub max_members: u32,
    /// How long a diff window stays open after its first join or leave.
    pub diff_ms: u64,
    /// Above this many connections subscribers get counts, not diffs.
    pub join_leave_max_members: u32,
}

impl Default for NamespaceSection {
    fn default() -> Self {
        NamespaceSection {
            delivery: Delivery::default(),
            conflation_key: None,
            presence: false,
            join_leave: false,
            max_members: 1000,
            diff_ms: 200,
            join_leave_max_members: 100,
        }
    }
}

/// One presence namespace's settings (§13), looked up per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PresenceRule {
    pub join_leave: bool,
    pub max_members: u32,
    pub diff_ms: u64,
    pub join_leave_max_members: u32,
    /// `max_members` counts users, not connections, and a window's news
    /// is also told per user (a user's first connection in, its last
    /// out): Pusher's presence, where members are users (§16). Never set
    /// by a namespace.
    pub by_user: bool,
}

impl NamespaceSection {
    /// The presence settings, when this namespace turns presence on.
    pub fn presence_rule(&self) -> Option<PresenceRule> {
        self.presence.then_some(PresenceRule {
            join_leave: self.join_leave,
            max_members: self.max_members,
            diff_ms: self.diff_ms,
            join_leave_max_members: self.join_leave_max_members,
            by_user: false,
        })
    }
}

/// The presence rule of `channel`'s namespace, if it has presence.
pub fn presence_rule(
    sections: &HashMap<String, NamespaceSection>,
    channel: &str,
) -> Option<PresenceRule> {
    if sections.is_empty() {
        return None;
    }
    let ns = crate::protocol::channel::namespace(channel);
    sections.get(ns).and_then(NamespaceSection::presence_rule)
}

/// How one conflating namespace picks a message's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflation {
    /// The pointer into `data`; `None`: one key per channel.
    pub pointer: Option<String>,
}

/// The conflating namespaces, looked up once per channel (not per
/// message): every other namespace queues.
#[derive(Debug, Clone, Default)]
pub struct DeliveryClasses {
    conflating: HashMap<String, Arc<Conflation>>,
}

impl DeliveryClasses {
    pub fn new(sections: &HashMap<String, NamespaceSection>) -> DeliveryClasses {
        let conflating = sections
            .iter()
            .filter(|(_, s)| s.delivery == Delivery::Conflate)
            .map(|(name, s)| {
                let pointer = s.conflation_key.clone().filter(|p| !p.is_empty());
                (name.clone(), Arc::new(Conflation { pointer }))
            })
            .collect();
        DeliveryClasses { conflating }
    }

    /// The conflation rule for `channel`'s namespace, if it conflates.
    pub fn conflation(&self, channel: &str) -> Option<Arc<Conflation>> {
        if self.conflating.is_empty() {
            return None;
        }
        let ns = crate::protocol::channel::namespace(channel);
        self.conflating.get(ns).cloned()
    }
}

/// Checks a `[namespaces]` table: names a channel can start with, and
/// pointers that are JSON pointers, given only where they mean something.
pub(super) fn problems(sections: &HashMap<String, NamespaceSection>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, s) in sections {
        let path = format!("namespaces.{name}");
        if name.contains(':') || crate::protocol::channel::validate(name).is_err() {
            out.push(format!(
                "{path}: a namespace is 1-128 characters of A-Z a-z 0-9 _ . @ = - (no `:`)"
            ));
        }
        if s.presence {
            if s.max_members == 0 {
                out.push(format!("{path}.max_members: at least 1"));
            }
            if !(10..=60_000).contains(&s.diff_ms) {
                out.push(format!("{path}.diff_ms: 10 to 60000 milliseconds"));
            }
        } else if s.join_leave {
            out.push(format!(
                "{path}.join_leave: only meaningful with presence = true"
            ));
        }
        if let Some(p) = &s.conflation_key {
            if s.delivery != Delivery::Conflate {
                out.push(format!(
                    "{path}.conflation_key: only meaningful with delivery = \"conflate\""
                ));
            }
            if !p.is_empty() && !p.starts_with('/') {
                out.push(format!(
                    "{path}.conflation_key: {p:?} is not a JSON pointer (it starts with `/`, e.g. \"/user\")"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections(toml: &str) -> HashMap<String, NamespaceSection> {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn only_conflating_namespaces_are_kept_and_looked_up_by_prefix() {
        let s = sections(
            "[cursors]\ndelivery = \"conflate\"\nconflation_key = \"/user\"\n\
             [scores]\ndelivery = \"conflate\"\n[doc]\ndelivery = \"queue\"\n",
        );
        assert!(problems(&s).is_empty());
        let c = DeliveryClasses::new(&s);
        assert_eq!(
            c.conflation("cursors:doc1").unwrap().pointer.as_deref(),
            Some("/user")
        );
        assert_eq!(c.conflation("scores").unwrap().pointer, None);
        assert!(c.conflation("doc:1").is_none());
        assert!(c.conflation("cursorsx:1").is_none());
    }

    #[test]
    fn bad_names_and_pointers_are_reported_with_their_path() {
        let s = sections(
            "[\"a:b\"]\ndelivery = \"conflate\"\n[doc]\nconflation_key = \"/user\"\n\
             [cur]\ndelivery = \"conflate\"\nconflation_key = \"user\"\n",
        );
        let mut p = problems(&s);
        p.sort();
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("namespaces.a:b:"), "{p:?}");
        assert!(p[1].starts_with("namespaces.cur.conflation_key"), "{p:?}");
        assert!(p[2].starts_with("namespaces.doc.conflation_key"), "{p:?}");
    }
}
