//! The owner's discovery directories and the suggestions switch (§4.5).
//! Both are profile settings the card does not carry: changing them signs
//! nothing and sends nothing, but it is still the owner's decision, made as
//! a command through the core like every other.

use serde_json::{Value, json};

use crate::agent::Agent;
use crate::error::{Error, Result};
use crate::record::Table;

/// Most directories one agent asks (each lookup goes to every one).
pub const MAX_DIRECTORIES: usize = 16;
/// Longest directory URL taken.
pub const DIRECTORY_URL_MAX_LEN: usize = 256;

/// A directory's base URL, checked and written one way (`https://host[:port]
/// [/path]`, no trailing slash), so one directory is listed once. Plain
/// http is taken (a local directory, tests); credentials, a query or a
/// fragment are not: the URL is shown in every result.
pub fn directory_url(raw: &str) -> Result<String> {
    let shown = without_credentials(raw);
    let bad = |why: &str| Error::Input(format!("{shown}: not a directory URL ({why})"));
    if raw.len() > DIRECTORY_URL_MAX_LEN {
        return Err(bad("over 256 characters"));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("spaces or control characters"));
    }
    let u = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    if !matches!(u.scheme(), "https" | "http") {
        return Err(bad("it must start with https:// or http://"));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad("it must not carry a user name or password"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(bad("it must not carry a query or a fragment"));
    }
    Ok(u.as_str().trim_end_matches('/').to_string())
}

/// `raw` as an error may show it: a user name or password before the host
/// is left out (a credential is never echoed).
fn without_credentials(raw: &str) -> String {
    let Some(i) = raw.find("://") else {
        return raw.to_string();
    };
    let rest = &raw[i + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{}://…@{}", &raw[..i], &rest[at + 1..]),
        None => raw.to_string(),
    }
}

/// How a stored entry compares: written one way if it reads as a URL
/// (entries from before the check are matched as they are).
fn same_directory(stored: &str, canon: &str) -> bool {
    directory_url(stored).map_or(stored == canon, |s| s == canon)
}

/// The directories given at `rdv init`, checked, each once, within bounds.
pub fn directory_list(raw: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for r in raw {
        let u = directory_url(r)?;
        if !out.contains(&u) {
            out.push(u);
        }
    }
    if out.len() > MAX_DIRECTORIES {
        return Err(Error::Input(format!(
            "at most {MAX_DIRECTORIES} directories"
        )));
    }
    Ok(out)
}

impl Agent {
    /// §4.5: one more directory for discovery, suggestions and `list-me`.
    pub(crate) fn add_directory(&mut self, raw: &str) -> Result<Value> {
        let url = directory_url(raw)?;
        let mut p = self.state.profile()?.clone();
        if p.directories.iter().any(|d| same_directory(d, &url)) {
            return Err(Error::Input(format!("{url} is already a directory")));
        }
        if p.directories.len() >= MAX_DIRECTORIES {
            return Err(Error::Refused(format!(
                "at most {MAX_DIRECTORIES} directories: remove one first"
            )));
        }
        p.directories.push(url.clone());
        let list = p.directories.clone();
        self.set_profile_setting(p);
        Ok(json!({ "added": url, "directories": list }))
    }

    /// Stops using a directory. Listings made there stay until they expire
    /// or `rdv directory unlist --directory URL` withdraws them.
    pub(crate) fn remove_directory(&mut self, raw: &str) -> Result<Value> {
        let url = directory_url(raw)?;
        let mut p = self.state.profile()?.clone();
        let before = p.directories.len();
        p.directories.retain(|d| !same_directory(d, &url));
        if p.directories.len() == before {
            return Err(Error::NotFound(format!(
                "{url} is not a directory of this agent"
            )));
        }
        let list = p.directories.clone();
        self.set_profile_setting(p);
        Ok(json!({ "removed": url, "directories": list }))
    }

    /// §4.5: suggestions on or off; says what it was.
    pub(crate) fn set_suggest(&mut self, on: bool) -> Result<Value> {
        let mut p = self.state.profile()?.clone();
        let was = p.suggest;
        if was != on {
            p.suggest = on;
            self.set_profile_setting(p);
        }
        Ok(json!({ "suggest": on, "was": was }))
    }

    /// A profile change the card does not show: kept, nothing re-signed.
    fn set_profile_setting(&mut self, p: crate::state::Profile) {
        self.state.profile = Some(p);
        self.state.touch(Table::Profile, "profile");
    }
}
