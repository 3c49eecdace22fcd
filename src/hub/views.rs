//! Profiles in the hub (docs/architecture.md, "Profiles"): the views built from the
//! settings and the upstream table, which view a client sees, and who hears that a
//! view's lists changed.
//!
//! Never: copies an upstream session, a subscription or a cache entry per view; views
//! only narrow what clients see and where their requests may go.

use super::Hub;
use crate::downstream::outbox::{CoalesceKey, OutKind};
use crate::protocol::{methods, Message};
use crate::state::ids::{ClientId, UpstreamId, ViewId};
use crate::state::views::ViewSpec;

/// Which clients a `list_changed` is for: those of these views.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Audience(pub Vec<ViewId>);

impl Audience {
    pub(super) fn includes(&self, view: ViewId) -> bool {
        self.0.contains(&view)
    }
}

impl Hub {
    /// The profiles' views as the settings and the current upstream table make them
    /// (a server name maps to its live upstream).
    fn view_specs(&self) -> Vec<(ViewId, ViewSpec)> {
        self.settings
            .profiles
            .iter()
            .map(|p| {
                let members = self
                    .upstreams
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| {
                        !matches!(s.status, super::UpstreamStatus::Removed)
                            && p.servers.contains(&s.name)
                    })
                    .map(|(i, _)| UpstreamId(i));
                (p.id, ViewSpec::of(members, p.tools.clone()))
            })
            .collect()
    }

    /// Applies the views of the current settings and upstreams; returns the views that
    /// changed (a new one, a new filter, other servers), and closes the clients of
    /// views that no longer exist.
    pub(super) fn apply_views(&mut self) -> Vec<ViewId> {
        let specs = self.view_specs();
        let changed: Vec<ViewId> = specs
            .iter()
            .filter(|(id, spec)| self.catalog.view(*id) != Some(spec))
            .map(|(id, _)| *id)
            .collect();
        self.catalog.set_views(specs);
        let gone: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| self.catalog.view(c.view).is_none())
            .map(|(id, _)| *id)
            .collect();
        for client in gone {
            if let Some(c) = self.clients.get(&client) {
                c.outbox
                    .close(crate::downstream::outbox::CloseReason::Closed);
            }
            self.remove_client(client, "its profile was removed from the configuration");
        }
        changed
    }

    /// The view a client sees.
    pub(super) fn view_of(&self, client: ClientId) -> ViewId {
        self.clients
            .get(&client)
            .map_or(ViewId::DEFAULT, |c| c.view)
    }

    /// The live upstreams of a view.
    pub(super) fn view_members(&self, view: ViewId) -> Vec<UpstreamId> {
        (0..self.upstreams.len())
            .map(UpstreamId)
            .filter(|u| {
                !matches!(self.upstreams[u.0].status, super::UpstreamStatus::Removed)
                    && self.catalog.in_view(view, *u)
            })
            .collect()
    }

    /// The views that show upstream `u`.
    pub(super) fn views_with(&self, u: UpstreamId) -> Audience {
        let mut views: Vec<ViewId> = self.clients.values().map(|c| c.view).collect();
        views.sort_unstable();
        views.dedup();
        views.retain(|v| self.catalog.in_view(*v, u));
        Audience(views)
    }

    /// Tells the clients of `audience` that every list may have changed.
    pub(super) fn lists_changed_for(&mut self, audience: &Audience) {
        for method in [
            methods::TOOLS_LIST_CHANGED,
            methods::PROMPTS_LIST_CHANGED,
            methods::RESOURCES_LIST_CHANGED,
        ] {
            self.broadcast(
                &Message::notification(method, None),
                OutKind::Coalescible(CoalesceKey::Method(method.into())),
                audience,
            );
        }
    }

    /// Clients per profile (`None`: the default view), for the operator's view.
    pub(super) fn clients_per_view(&self) -> Vec<(Option<String>, usize)> {
        let mut out: Vec<(Option<String>, usize)> = vec![(None, 0)];
        out.extend(
            self.settings
                .profiles
                .iter()
                .map(|p| (Some(p.name.clone()), 0)),
        );
        for c in self.clients.values() {
            let slot = if c.view == ViewId::DEFAULT {
                Some(0)
            } else {
                self.settings
                    .profiles
                    .iter()
                    .position(|p| p.id == c.view)
                    .map(|i| i + 1)
            };
            if let Some(i) = slot {
                out[i].1 += 1;
            }
        }
        out
    }
}
