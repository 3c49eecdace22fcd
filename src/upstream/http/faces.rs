//! A Streamable HTTP server that answers both eras and offers different things on each
//! (docs/architecture.md, "Servers with two faces"): with `protocol = "auto"`, mcpmux
//! then keeps one session per face (an `initialize` session and a 2026-07-28 one) and
//! routes each message to the face that serves it, so neither era's clients lose what
//! the server gives them directly.
//!
//! - [`modern_covers`] is the rule that decides: the 2026-07-28 face alone is used when
//!   it declares every capability (and every `subscribe`/`listChanged` flag) that the
//!   `initialize` face declares; otherwise both are kept.
//! - [`Router`] is the pure routing state between the hub and the two sessions: the hub
//!   sees one upstream whose capabilities are the union of both faces.
//!
//! Routing, per message from the hub:
//! - a client's request goes to the face of the client's own era, except a `tools/call`
//!   or `prompts/get` for a name only the other face lists;
//! - `resources/subscribe`/`unsubscribe` go to the one face that holds subscriptions:
//!   the `initialize` face when it declares `resources.subscribe`, else the other (so a
//!   URI still has one upstream subscription);
//! - mcpmux's own reads (shared by clients of both eras) go to that face too;
//! - a first list page is asked of both faces and merged (the `initialize` face's items
//!   first, then the other's items it lacks); a page with a cursor, and a merge where
//!   either face pages, are the `initialize` face's alone;
//! - `logging/setLevel` goes to both (the 2026-07-28 face keeps the level for its
//!   requests' `_meta`); the copy's answer is dropped;
//! - an answer to a server→client request goes to the face that asked; a cancellation
//!   to the face its request went to; other notifications to both.
//!
//! Pure state: never does I/O and never changes a message it does not merge or re-id.

use std::collections::HashMap;

use serde_json::Value;

use crate::protocol::{methods, Kind, Message, RawId};
use crate::upstream::{DualFaces, Era, InitInfo, Related, UpstreamCmd, UpstreamEvent};

/// The capabilities compared between faces (others, such as `experimental`, are not
/// something a client of one era would miss).
const COMPARED: [&str; 5] = ["tools", "prompts", "resources", "logging", "completions"];

/// Whether the 2026-07-28 face offers everything the `initialize` face does: every
/// compared capability, and within it every flag that is `true`.
pub(crate) fn modern_covers(modern: &Value, legacy: &Value) -> bool {
    COMPARED.iter().all(|key| {
        let Some(l) = legacy.get(*key).filter(|v| !v.is_null()) else {
            return true;
        };
        let Some(m) = modern.get(*key).filter(|v| !v.is_null()) else {
            return false;
        };
        match l.as_object() {
            Some(flags) => flags
                .iter()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .all(|(flag, _)| m.get(flag).and_then(Value::as_bool) == Some(true)),
            None => true,
        }
    })
}

/// One of the two sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Face {
    /// The `initialize` session.
    Legacy,
    /// The 2026-07-28 session.
    Modern,
}

impl Face {
    fn index(self) -> usize {
        match self {
            Face::Legacy => 0,
            Face::Modern => 1,
        }
    }
}

/// What to do with the answer to a request id the router minted.
#[derive(Debug)]
enum Minted {
    /// A copy whose answer nobody waits for.
    Drop,
    /// The `initialize` face's part of the merged list request `original`.
    ListPart(RawId),
}

/// A list request asked of both faces, waiting for both answers.
#[derive(Debug, Default)]
struct Merge {
    /// Each face's answer, by [`Face::index`].
    parts: [Option<Message>; 2],
}

/// Routing state of one two-faced session.
#[derive(Debug)]
pub(super) struct Router {
    /// Where subscriptions (and mcpmux's own reads) go.
    subscriptions: Face,
    /// Each face's `Ready`, until both came.
    ready: [Option<InitInfo>; 2],
    /// Which faces list a tool or prompt (`"tools"`/`"prompts"`, name).
    listed: HashMap<(&'static str, String), [bool; 2]>,
    /// The face each request in flight went to, by the id the hub gave it.
    in_flight: HashMap<RawId, Face>,
    /// The face that sent each server→client request still unanswered.
    asked_by: HashMap<RawId, Face>,
    /// Ids the router minted for copies, and what their answers are for.
    minted: HashMap<RawId, Minted>,
    merges: HashMap<RawId, Merge>,
    next: u64,
}

impl Router {
    /// Routing for a server whose `initialize` face declared `legacy_caps`.
    pub(super) fn new(legacy_caps: &Value) -> Self {
        let subscriptions = if legacy_caps["resources"]["subscribe"] == true {
            Face::Legacy
        } else {
            Face::Modern
        };
        Router {
            subscriptions,
            ready: [None, None],
            listed: HashMap::new(),
            in_flight: HashMap::new(),
            asked_by: HashMap::new(),
            minted: HashMap::new(),
            merges: HashMap::new(),
            next: 0,
        }
    }

    fn mint(&mut self, what: Minted) -> RawId {
        self.next += 1;
        let id = RawId::parse(&format!("\"mcpmux-face-{}\"", self.next)).expect("valid id");
        self.minted.insert(id.clone(), what);
        id
    }

    /// Where a command of the hub goes (one command may go to both faces).
    pub(super) fn on_command(&mut self, cmd: UpstreamCmd) -> Vec<(Face, UpstreamCmd)> {
        let (bytes, ctx) = match cmd {
            UpstreamCmd::Send(b) => (b, None),
            UpstreamCmd::Request(b, ctx) => (b, Some(ctx)),
        };
        let Ok(msg) = Message::parse(&bytes) else {
            return vec![(Face::Legacy, UpstreamCmd::Send(bytes))];
        };
        let rebuild = |b: bytes::Bytes| match &ctx {
            Some(c) => UpstreamCmd::Request(b, c.clone()),
            None => UpstreamCmd::Send(b),
        };
        match msg.kind() {
            Kind::Request => {
                let id = msg.id().cloned().expect("requests have ids");
                let method = msg.method().unwrap_or_default();
                // The client's era, or none for mcpmux's own requests.
                let client = ctx.as_ref().filter(|c| c.for_client).map(|c| {
                    if c.bridge_input {
                        Face::Legacy
                    } else {
                        Face::Modern
                    }
                });
                let params: Value = msg
                    .params()
                    .and_then(|p| serde_json::from_str(p.get()).ok())
                    .unwrap_or_default();
                if is_list(method) && params.get("cursor").is_none() {
                    // Both faces; the hub's id stays with the 2026-07-28 copy.
                    let mut copy = msg.clone();
                    copy.set_id(&self.mint(Minted::ListPart(id.clone())));
                    self.merges.insert(id.clone(), Merge::default());
                    self.in_flight.insert(id, Face::Modern);
                    return vec![
                        (Face::Legacy, rebuild(copy.to_bytes())),
                        (Face::Modern, rebuild(bytes)),
                    ];
                }
                if method == methods::LOGGING_SET_LEVEL {
                    let mut copy = msg.clone();
                    copy.set_id(&self.mint(Minted::Drop));
                    self.in_flight.insert(id, Face::Legacy);
                    return vec![
                        (Face::Legacy, rebuild(bytes)),
                        (Face::Modern, rebuild(copy.to_bytes())),
                    ];
                }
                let face = match method {
                    methods::SUBSCRIBE | methods::UNSUBSCRIBE => self.subscriptions,
                    _ if is_list(method) => Face::Legacy,
                    methods::TOOLS_CALL | PROMPTS_GET => {
                        let kind = if method == methods::TOOLS_CALL {
                            "tools"
                        } else {
                            "prompts"
                        };
                        let own = client.unwrap_or(Face::Legacy);
                        let name = params["name"].as_str().unwrap_or_default();
                        match self.listed.get(&(kind, name.to_owned())) {
                            Some(on) if !on[own.index()] && on.iter().any(|b| *b) => other(own),
                            _ => own,
                        }
                    }
                    _ => client.unwrap_or(self.subscriptions),
                };
                self.in_flight.insert(id, face);
                vec![(face, rebuild(bytes))]
            }
            Kind::Notification => {
                if msg.method() == Some(methods::CANCELLED) {
                    let target = msg
                        .params()
                        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                        .and_then(|p| RawId::parse(&p["requestId"].to_string()))
                        .and_then(|id| self.in_flight.get(&id).copied());
                    if let Some(face) = target {
                        return vec![(face, rebuild(bytes))];
                    }
                }
                vec![
                    (Face::Legacy, rebuild(bytes.clone())),
                    (Face::Modern, rebuild(bytes)),
                ]
            }
            Kind::Response => {
                let face = msg
                    .id()
                    .and_then(|id| self.asked_by.remove(id))
                    .unwrap_or(Face::Legacy);
                vec![(face, rebuild(bytes))]
            }
        }
    }

    /// What the hub gets of an event of one face (nothing while answers are merged or
    /// until both faces are ready).
    pub(super) fn on_event(&mut self, face: Face, ev: UpstreamEvent) -> Option<UpstreamEvent> {
        match ev {
            UpstreamEvent::Ready(info) => {
                self.ready[face.index()] = Some(info);
                let [Some(legacy), Some(modern)] = &self.ready else {
                    return None;
                };
                Some(UpstreamEvent::Ready(joined(legacy, modern)))
            }
            UpstreamEvent::Message(msg, related) => self.on_message(face, msg, related),
            // Only a stdio server's reader batches.
            other @ (UpstreamEvent::Down { .. }
            | UpstreamEvent::NeedsLogin { .. }
            | UpstreamEvent::Messages(_)) => Some(other),
        }
    }

    fn on_message(&mut self, face: Face, msg: Message, related: Related) -> Option<UpstreamEvent> {
        match msg.kind() {
            Kind::Request => {
                if let Some(id) = msg.id() {
                    self.asked_by.insert(id.clone(), face);
                }
                Some(UpstreamEvent::Message(msg, related))
            }
            Kind::Notification => Some(UpstreamEvent::Message(msg, related)),
            Kind::Response => {
                let id = msg.id().cloned()?;
                let original = match self.minted.remove(&id) {
                    Some(Minted::Drop) => return None,
                    Some(Minted::ListPart(original)) => original,
                    None if self.merges.contains_key(&id) => id,
                    None => {
                        self.in_flight.remove(&id);
                        return Some(UpstreamEvent::Message(msg, related));
                    }
                };
                let merge = self.merges.get_mut(&original)?;
                merge.parts[face.index()] = Some(msg);
                let [Some(_), Some(_)] = &merge.parts else {
                    return None;
                };
                let merge = self.merges.remove(&original).expect("present");
                self.in_flight.remove(&original);
                let [Some(legacy), Some(modern)] = merge.parts else {
                    unreachable!("both parts checked")
                };
                let merged = self.merge_lists(&original, legacy, modern);
                Some(UpstreamEvent::Message(merged, Related::Request(original)))
            }
        }
    }

    /// One answer for a list asked of both faces, under the hub's id.
    fn merge_lists(&mut self, id: &RawId, mut legacy: Message, modern: Message) -> Message {
        legacy.set_id(id);
        let parse = |m: &Message| -> Option<Value> { serde_json::from_str(m.result()?.get()).ok() };
        let (l, m) = match (parse(&legacy), parse(&modern)) {
            (Some(l), Some(m)) => (l, m),
            (Some(_), None) => return legacy,
            (None, Some(_)) => return modern,
            (None, None) => return modern,
        };
        let Some((key, ident)) = list_members(&l, &m) else {
            return legacy;
        };
        let empty = Vec::new();
        let l_items = l[key].as_array().unwrap_or(&empty);
        let m_items = m[key].as_array().unwrap_or(&empty);
        if let Some(kind) = match key {
            "tools" => Some("tools"),
            "prompts" => Some("prompts"),
            _ => None,
        } {
            for (face, items) in [(Face::Legacy, l_items), (Face::Modern, m_items)] {
                for name in items.iter().filter_map(|i| i[ident].as_str()) {
                    self.listed.entry((kind, name.to_owned())).or_default()[face.index()] = true;
                }
            }
        }
        if l.get("nextCursor").is_some() || m.get("nextCursor").is_some() {
            return legacy;
        }
        let mut items = l_items.clone();
        for item in m_items {
            if !l_items.iter().any(|x| x[ident] == item[ident]) {
                items.push(item.clone());
            }
        }
        // The 2026-07-28 answer's envelope (`resultType`, `ttlMs`, `cacheScope`).
        let mut result = m.clone();
        result[key] = Value::Array(items);
        Message::response(id, &result)
    }
}

const PROMPTS_GET: &str = "prompts/get";

/// The four list methods the hub merges across upstreams.
fn is_list(method: &str) -> bool {
    matches!(
        method,
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list"
    )
}

fn other(face: Face) -> Face {
    match face {
        Face::Legacy => Face::Modern,
        Face::Modern => Face::Legacy,
    }
}

/// The list member of a list result and the member that identifies an item.
fn list_members(l: &Value, m: &Value) -> Option<(&'static str, &'static str)> {
    [
        ("tools", "name"),
        ("prompts", "name"),
        ("resources", "uri"),
        ("resourceTemplates", "uriTemplate"),
    ]
    .into_iter()
    .find(|(key, _)| {
        l.get(*key).is_some_and(Value::is_array) || m.get(*key).is_some_and(Value::is_array)
    })
}

/// The upstream the hub sees: a 2026-07-28 server (so each request comes with its
/// client's envelope facts) whose capabilities are the union of both faces.
fn joined(legacy: &InitInfo, modern: &InitInfo) -> InitInfo {
    let mut capabilities = legacy.capabilities.clone();
    union_into(&mut capabilities, &modern.capabilities);
    let pick = |a: &Value, b: &Value| if a.is_null() { b.clone() } else { a.clone() };
    InitInfo {
        era: Era::Modern,
        supported_versions: modern.supported_versions.clone(),
        discover_hints: modern.discover_hints,
        protocol_version: modern.protocol_version.clone(),
        capabilities,
        server_info: pick(&legacy.server_info, &modern.server_info),
        instructions: legacy
            .instructions
            .clone()
            .or_else(|| modern.instructions.clone()),
        dual: Some(Box::new(DualFaces {
            legacy: legacy.clone(),
            modern: modern.clone(),
        })),
    }
}

/// Adds to `into` what `from` declares: missing members, and `true` flags.
fn union_into(into: &mut Value, from: &Value) {
    let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) else {
        return;
    };
    for (k, v) in from {
        match into.get_mut(k) {
            None => {
                into.insert(k.clone(), v.clone());
            }
            Some(existing) if existing.is_object() && v.is_object() => union_into(existing, v),
            Some(existing) => {
                if v == &Value::Bool(true) {
                    *existing = Value::Bool(true);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "faces_tests.rs"]
mod tests;
