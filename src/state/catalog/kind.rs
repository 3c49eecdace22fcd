//! The four paginated lists (tools, prompts, resources, templates) and the names of
//! their methods, members and capabilities. Facts only: no state, no I/O.

/// The four paginated lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl ListKind {
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::Templates,
    ];

    pub fn from_method(m: &str) -> Option<ListKind> {
        Some(match m {
            "tools/list" => ListKind::Tools,
            "prompts/list" => ListKind::Prompts,
            "resources/list" => ListKind::Resources,
            "resources/templates/list" => ListKind::Templates,
            _ => return None,
        })
    }

    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
        }
    }

    /// The array member of the result.
    pub fn items_key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The member of each item that is namespaced and routed on.
    pub fn name_key(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::Templates => "uriTemplate",
        }
    }

    /// The server capability that offers this list.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::Templates => "resources",
        }
    }

    /// The kinds a `*/list_changed` notification invalidates.
    pub fn changed_by(notification: &str) -> &'static [ListKind] {
        match notification {
            "notifications/tools/list_changed" => &[ListKind::Tools],
            "notifications/prompts/list_changed" => &[ListKind::Prompts],
            "notifications/resources/list_changed" => &[ListKind::Resources, ListKind::Templates],
            _ => &[],
        }
    }

    pub(super) fn uses_uri(self) -> bool {
        matches!(self, ListKind::Resources | ListKind::Templates)
    }
}
