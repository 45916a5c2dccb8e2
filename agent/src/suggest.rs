//! Friend suggestions (§4.5): the owner's own contact list (a vCard or CSV
//! export) is looked up locally against the configured directories, and
//! each hit is shown with the command that would connect. The card found is
//! kept (binding directory); nothing is sent to anyone until the owner runs
//! that command. On by default; `rdv suggest --off` switches it off.

use std::io::IsTerminal;
use std::path::Path;

use clap::Args;
use rdv_agent_core::Command;
use rdv_agent_core::peer_text::terminal_safe;
use rdv_agent_core::state::{Binding, ContactStatus};
use rdv_proto::doc::card::Card;
use rdv_proto::{Address, AgentId};
use serde::Serialize;
use serde_json::json;

use crate::cli::Global;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};
use crate::terminal;

/// Largest contacts file read.
pub const FILE_MAX_BYTES: usize = 16 << 20;
/// Most addresses taken from one file; a larger file is refused.
pub const MAX_ADDRESSES: usize = 50_000;
/// Most fields in one CSV row.
pub const CSV_MAX_FIELDS: usize = 4096;
/// A name is shown cut to this many characters.
pub const NAME_MAX_CHARS: usize = 128;
/// Addresses per directory lookup: one evaluation batch at a directory's
/// default `max_batch`, and one step of the progress bar.
pub const LOOKUP_BATCH: usize = 1000;

/// `rdv suggest`.
#[derive(Debug, Args)]
#[command(after_help = "\
Suggestions are on by default (SPEC §4.5). `rdv suggest --off` switches them \
off for this agent, `rdv suggest --on` back on; `rdv suggest` alone shows the setting \
and the directories asked (`rdv directory add|remove|list` changes them).

A vCard file (.vcf) gives its EMAIL and TEL properties with FN (or N) as the \
name; a CSV file needs a header row: columns whose header contains \"mail\" are \
emails, \"phone\", \"tel\" or \"mobile\" phones (not \"type\", \"label\" or \
\"display\" columns), and \"name\" (or first and last name) the name. Phones need \
their country code (+…). At most 16 MiB and 50,000 addresses. The directories \
see only blinded lookups, never the addresses. Nothing is sent to anyone: \
connect by running the `rdv contact request` command shown.")]
pub struct SuggestArgs {
    /// Your contacts: a vCard (.vcf) or CSV file exported from an address
    /// book, or - for stdin.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["on", "off"])]
    pub contacts: Option<String>,
    /// Look up in this directory instead of the configured ones. Repeatable.
    #[arg(long = "directory", value_name = "URL", requires = "contacts")]
    pub directories: Vec<String>,
    /// Switch suggestions on.
    #[arg(long, conflicts_with = "off")]
    pub on: bool,
    /// Switch suggestions off.
    #[arg(long)]
    pub off: bool,
}

/// How a contacts file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    VCard,
    Csv,
}

/// One address from the file, canonical (§4.6), with the owner's name for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Option<String>,
    pub address: Address,
}

/// What a contacts file gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContactList {
    pub entries: Vec<Entry>,
    /// Entries that are not an email or a +phone (with its country code).
    pub invalid: usize,
    /// Addresses already taken from an earlier entry.
    pub duplicates: usize,
    seen: std::collections::HashSet<String>,
}

impl ContactList {
    fn add(&mut self, name: Option<&str>, raw: &str) -> Result<()> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Ok(());
        }
        let Ok(address) = Address::parse(raw) else {
            self.invalid += 1;
            return Ok(());
        };
        if self.seen.contains(address.canon()) {
            self.duplicates += 1;
            return Ok(());
        }
        if self.entries.len() >= MAX_ADDRESSES {
            return Err(Error::Input(format!(
                "the file has more than {MAX_ADDRESSES} addresses: split it"
            )));
        }
        self.seen.insert(address.canon().to_string());
        self.entries.push(Entry {
            name: name.and_then(clean_name),
            address,
        });
        Ok(())
    }
}

/// A name on one line, cut to [`NAME_MAX_CHARS`]; `None` when empty.
fn clean_name(s: &str) -> Option<String> {
    let one_line: Vec<&str> = s.split_whitespace().collect();
    let n: String = one_line.join(" ").chars().take(NAME_MAX_CHARS).collect();
    (!n.is_empty()).then_some(n)
}

/// The file's format: by extension, else by its first line.
pub fn detect_format(path: &str, bytes: &[u8]) -> Format {
    let ext = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("vcf" | "vcard") => return Format::VCard,
        Some("csv") => return Format::Csv,
        _ => {}
    }
    let head = &bytes[..bytes.len().min(64)];
    let head = String::from_utf8_lossy(head);
    let first = head.trim_start_matches('\u{feff}').trim_start();
    if first
        .get(..11)
        .is_some_and(|s| s.eq_ignore_ascii_case("BEGIN:VCARD"))
    {
        Format::VCard
    } else {
        Format::Csv
    }
}

/// Parses a contacts file strictly (§4.5 suggestions), within the bounds above.
pub fn parse_contacts(bytes: &[u8], format: Format) -> Result<ContactList> {
    if bytes.len() > FILE_MAX_BYTES {
        return Err(Error::Input(format!(
            "the contacts file is over {} MiB",
            FILE_MAX_BYTES >> 20
        )));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::Input(format!("the contacts file is not UTF-8: {e}")))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match format {
        Format::VCard => parse_vcard(text),
        Format::Csv => parse_csv(text),
    }
}

fn bad(line: usize, what: &str) -> Error {
    Error::Input(format!("contacts file, line {line}: {what}"))
}

/// vCard 2.1, 3.0 and 4.0 (RFC 6350): lines unfolded, properties
/// `[group.]NAME[;params]:value`, cards between BEGIN:VCARD and END:VCARD.
fn parse_vcard(text: &str) -> Result<ContactList> {
    #[derive(Default)]
    struct Acc {
        fn_: Option<String>,
        n: Option<String>,
        values: Vec<String>,
    }
    let mut list = ContactList::default();
    let mut card: Option<Acc> = None;
    // vCards nested in a property (vCard 2.1 AGENT) are skipped.
    let mut nested = 0usize;
    for (line_no, line) in unfold(text) {
        if line.trim().is_empty() {
            continue;
        }
        let (name, value) = split_property(&line)
            .ok_or_else(|| bad(line_no, "not a vCard property (NAME:value)"))?;
        let name = name.rsplit('.').next().unwrap_or(name).to_ascii_uppercase();
        let is_vcard = value.trim().eq_ignore_ascii_case("VCARD");
        let Some(acc) = card.as_mut() else {
            if name == "BEGIN" && is_vcard {
                card = Some(Acc::default());
                continue;
            }
            return Err(bad(line_no, "outside BEGIN:VCARD … END:VCARD"));
        };
        match name.as_str() {
            "BEGIN" if is_vcard => nested += 1,
            "END" if is_vcard && nested > 0 => nested -= 1,
            "END" if is_vcard => {
                let Some(acc) = card.take() else { continue };
                let name = acc.fn_.or(acc.n);
                for v in &acc.values {
                    list.add(name.as_deref(), v)?;
                }
            }
            _ if nested > 0 => {}
            "FN" => acc.fn_ = Some(unescape(value)),
            "N" => acc.n = structured_name(value),
            "EMAIL" => {
                let v = unescape(value);
                acc.values.push(strip_prefix_ci(&v, "mailto:").to_string());
            }
            "TEL" => {
                let v = strip_prefix_ci(value, "tel:");
                // A tel: URI's parameters (;ext=…) are not the number.
                let v = v.split(';').next().unwrap_or_default();
                acc.values.push(v.to_string());
            }
            _ => {}
        }
    }
    if card.is_some() {
        return Err(Error::Input(
            "contacts file: a vCard has no END:VCARD".into(),
        ));
    }
    Ok(list)
}

/// Logical lines with the number of their first physical line: a line
/// starting with a space or tab continues the one before (RFC 6350 §3.2).
fn unfold(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        match (line.strip_prefix([' ', '\t']), out.last_mut()) {
            (Some(rest), Some((_, prev))) => prev.push_str(rest),
            _ => out.push((i + 1, line.to_string())),
        }
    }
    out
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> &'a str {
    match s.get(..prefix.len()) {
        Some(p) if p.eq_ignore_ascii_case(prefix) => &s[prefix.len()..],
        _ => s,
    }
}

/// The name and value of a property line: the value starts after the first
/// colon outside a quoted parameter value.
fn split_property(line: &str) -> Option<(&str, &str)> {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ':' if !quoted => {
                let head = &line[..i];
                let name = head.split(';').next().unwrap_or(head);
                let ok = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
                return ok.then(|| (name, &line[i + 1..]));
            }
            _ => {}
        }
    }
    None
}

/// A vCard text value: `\,` `\;` `\\` as themselves, `\n` as a space.
fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut it = v.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n' | 'N') => out.push(' '),
            Some(x) => out.push(x),
            None => {}
        }
    }
    out
}

/// `N:Family;Given;Additional;Prefix;Suffix` as "Given Family".
fn structured_name(v: &str) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut it = v.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => {
                if let Some(x) = it.next() {
                    cur.push(x);
                }
            }
            ';' => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    let family = parts.first().map(String::as_str).unwrap_or_default();
    let given = parts.get(1).map(String::as_str).unwrap_or_default();
    clean_name(&format!("{given} {family}"))
}

/// CSV (RFC 4180) with a header row; `,`, `;` or tab, as the header uses most.
fn parse_csv(text: &str) -> Result<ContactList> {
    let first = text.lines().next().unwrap_or_default();
    let delim = [',', ';', '\t']
        .into_iter()
        .max_by_key(|d| first.matches(*d).count())
        .unwrap_or(',');
    let rows = csv_rows(text, delim)?;
    let Some((header, rows)) = rows.split_first() else {
        return Err(Error::Input("the contacts file is empty".into()));
    };
    let headers: Vec<String> = header.iter().map(|h| h.trim().to_lowercase()).collect();
    let not_value = |h: &str| h.contains("type") || h.contains("label");
    let is_mail = |h: &str| h.contains("mail") && !not_value(h) && !h.contains("display");
    let is_phone = |h: &str| {
        (h.contains("phone") || h.contains("tel") || h.contains("mobile")) && !not_value(h)
    };
    let col = |pred: &dyn Fn(&str) -> bool| headers.iter().position(|h| pred(h));
    let values: Vec<usize> = (0..headers.len())
        .filter(|&i| is_mail(&headers[i]) || is_phone(&headers[i]))
        .collect();
    if values.is_empty() {
        return Err(Error::Input(
            "the CSV header names no email or phone column (a header containing \
             mail, phone, tel or mobile)"
                .into(),
        ));
    }
    let full =
        col(&|h: &str| matches!(h, "name" | "full name" | "display name" | "formatted name"));
    let given = col(&|h: &str| matches!(h, "first name" | "given name" | "first"));
    let family = col(&|h: &str| matches!(h, "last name" | "family name" | "surname" | "last"));
    let cell = |row: &[String], i: Option<usize>| -> String {
        i.and_then(|i| row.get(i)).cloned().unwrap_or_default()
    };
    let mut list = ContactList::default();
    for row in rows {
        let mut name = cell(row, full);
        if name.trim().is_empty() {
            name = format!("{} {}", cell(row, given), cell(row, family));
        }
        for &i in &values {
            let Some(v) = row.get(i) else { continue };
            // Google's export puts several values in one cell: "a ::: b".
            for part in v.split(":::") {
                list.add(Some(&name), part)?;
            }
        }
    }
    Ok(list)
}

/// The rows of a CSV text; a quote must open and close a whole field.
fn csv_rows(text: &str, delim: char) -> Result<Vec<Vec<String>>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut line = 1usize;
    let mut at_start = true;
    let mut it = text.chars().peekable();
    let push_field = |row: &mut Vec<String>, field: &mut String, line: usize| -> Result<()> {
        if row.len() >= CSV_MAX_FIELDS {
            return Err(bad(line, "too many fields in a row"));
        }
        row.push(std::mem::take(field));
        Ok(())
    };
    while let Some(c) = it.next() {
        if at_start && c == '"' {
            let opened = line;
            loop {
                match it.next() {
                    None => return Err(bad(opened, "a quoted field is not closed")),
                    Some('"') if it.peek() == Some(&'"') => {
                        it.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(x) => {
                        if x == '\n' {
                            line += 1;
                        }
                        field.push(x);
                    }
                }
            }
            match it.peek() {
                None | Some('\r' | '\n') => {}
                Some(&d) if d == delim => {}
                Some(_) => return Err(bad(line, "text after a closing quote")),
            }
            at_start = false;
            continue;
        }
        match c {
            d if d == delim => {
                push_field(&mut row, &mut field, line)?;
                at_start = true;
                continue;
            }
            '\r' if it.peek() == Some(&'\n') => continue,
            '\r' | '\n' => {
                push_field(&mut row, &mut field, line)?;
                let row = std::mem::take(&mut row);
                if !(row.len() == 1 && row[0].is_empty()) {
                    rows.push(row);
                }
                line += 1;
                at_start = true;
                continue;
            }
            '"' => return Err(bad(line, "a quote inside an unquoted field")),
            x => field.push(x),
        }
        at_start = false;
    }
    if !row.is_empty() || !field.is_empty() || !at_start {
        push_field(&mut row, &mut field, line)?;
        rows.push(row);
    }
    Ok(rows)
}

/// One agent found for an address of the owner's list.
#[derive(Debug, Clone, Serialize)]
pub struct Suggestion {
    /// The owner's name for the entry, from the file.
    pub name: Option<String>,
    pub address: String,
    pub id: AgentId,
    pub fingerprint: String,
    pub directory: String,
    /// How many agents claim this address (claims are self-asserted).
    pub claimants: usize,
    #[serde(skip)]
    pub card: Card,
}

/// What one suggestion run found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub looked_up: usize,
    pub directories: usize,
    pub suggestions: Vec<Suggestion>,
    /// Hits that are already contacts, blocked, or this agent.
    pub known: usize,
    /// Directories that could not be asked (or not for every address), and why.
    pub errors: Vec<String>,
}

/// Looks the entries up in `directories` (batched), keeps each card found
/// (binding directory) and returns the hits. Sends nothing but the
/// directories' blinded lookups. `on_batch` is told how many addresses
/// each batch held.
pub async fn suggest(
    rt: &mut Runtime,
    list: &ContactList,
    directories: &[String],
    mut on_batch: impl FnMut(usize),
) -> Result<Report> {
    let profile = rt.agent().state.profile()?.clone();
    let allow_ws = profile.allow_ws;
    let mut report = Report {
        looked_up: list.entries.len(),
        directories: directories.len(),
        ..Report::default()
    };
    let names: std::collections::HashMap<&str, Option<&str>> = list
        .entries
        .iter()
        .map(|e| (e.address.canon(), e.name.as_deref()))
        .collect();
    let addresses: Vec<Address> = list.entries.iter().map(|e| e.address.clone()).collect();
    for dir in directories {
        let client = rdv_directory_client::DirectoryClient::new(dir);
        for (n, chunk) in addresses.chunks(LOOKUP_BATCH).enumerate() {
            let c = client.clone();
            let batch = chunk.to_vec();
            let now = time::OffsetDateTime::now_utc();
            let r = tokio::task::spawn_blocking(move || {
                c.lookup(&batch, now, allow_ws, &mut rand_core::OsRng)
            })
            .await
            .map_err(|e| Error::Carrier(e.to_string()))?;
            on_batch(chunk.len());
            let found = match r {
                Ok(f) => f,
                Err(e) => {
                    let done = n * LOOKUP_BATCH;
                    report.errors.push(format!(
                        "{dir}: {e} ({done} of {} addresses looked up there)",
                        addresses.len()
                    ));
                    // The rest of this directory is skipped (a refusal is
                    // most often its rate limit), the bar still completes.
                    on_batch(addresses.len().saturating_sub(done + chunk.len()));
                    break;
                }
            };
            for f in found {
                let claimants = f.cards.len();
                for fc in f.cards {
                    let id = fc.card.id.clone();
                    let s = &rt.agent().state;
                    let known = &id == rt.agent().id()
                        || s.blocked.contains(&id)
                        || s.contacts
                            .get(&id)
                            .is_some_and(|c| c.status == ContactStatus::Active);
                    if known {
                        report.known += 1;
                        continue;
                    }
                    if report
                        .suggestions
                        .iter()
                        .any(|x| x.id == id && x.address == f.address.canon())
                    {
                        continue;
                    }
                    report.suggestions.push(Suggestion {
                        name: names
                            .get(f.address.canon())
                            .copied()
                            .flatten()
                            .map(str::to_string),
                        address: f.address.canon().to_string(),
                        fingerprint: id.fingerprint(),
                        id,
                        directory: dir.clone(),
                        claimants,
                        card: fc.card,
                    });
                }
            }
        }
    }
    // Kept for `rdv contact request ID` (§4.5: no rediscovery). A local write only.
    let mut kept: Vec<&AgentId> = Vec::new();
    for s in &report.suggestions {
        if kept.contains(&&s.id) {
            continue;
        }
        kept.push(&s.id);
        rt.command(Command::KeepCard {
            card: s.card.doc.clone(),
            binding: Binding::Directory,
        })
        .await?;
    }
    Ok(report)
}

/// Switches suggestions on or off (§4.5) through the core, as every owner
/// decision is; returns the previous setting. The card does not carry this
/// switch, so nothing is re-signed or sent.
pub async fn set_suggest(rt: &mut Runtime, on: bool) -> Result<bool> {
    let v = rt.command(Command::SetSuggest { on }).await?;
    Ok(v["was"].as_bool().unwrap_or(on))
}

/// `rdv suggest`: switch, show, or run over a contacts file.
pub async fn run(a: SuggestArgs, g: &Global) -> Result<()> {
    let home = Home::resolve(g.home.clone(), g.profile.as_deref())?;
    let mut rt = Runtime::open(home, Options::default()).await?;
    let print = |v: &serde_json::Value| crate::directory_cmd::print_value(v, g.json);
    if a.on || a.off {
        let was = set_suggest(&mut rt, a.on).await?;
        return print(&json!({ "suggest": a.on, "was": was }));
    }
    let profile = rt.agent().state.profile()?.clone();
    let Some(file) = a.contacts else {
        return print(&json!({ "suggest": profile.suggest, "directories": profile.directories }));
    };
    if !profile.suggest {
        return Err(Error::Input(
            "friend suggestions are off for this agent (SPEC §4.5); switch them on with \
             `rdv suggest --on`"
                .into(),
        ));
    }
    let directories = if a.directories.is_empty() {
        profile.directories.clone()
    } else {
        a.directories
    };
    if directories.is_empty() {
        return Err(crate::directory_cmd::no_directory());
    }
    let bytes = crate::agent_cli::read_input(&file, FILE_MAX_BYTES).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            Error::Input(format!(
                "{file}: the contacts file is over {} MiB",
                FILE_MAX_BYTES >> 20
            ))
        } else {
            Error::Input(format!("{file}: {e}"))
        }
    })?;
    let list = parse_contacts(&bytes, detect_format(&file, &bytes))?;
    let total = list.entries.len() * directories.len();
    let bar = if !g.json && std::io::stderr().is_terminal() && total > LOOKUP_BATCH {
        let b = indicatif::ProgressBar::new(total as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} lookups ({eta})")
                .map_err(|e| Error::Input(e.to_string()))?
                .progress_chars("=> "),
        );
        b.set_message("looking up your contacts");
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let report = suggest(&mut rt, &list, &directories, |n| bar.inc(n as u64)).await;
    bar.finish_and_clear();
    let report = report?;
    print_report(&report, &list, g.json)?;
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Carrier(format!(
            "{} of {} directories could not be asked for every address",
            report.errors.len(),
            report.directories
        )))
    }
}

fn print_report(r: &Report, list: &ContactList, json_out: bool) -> Result<()> {
    let mut so = std::io::stdout().lock();
    let nothing_sent = "nothing was sent to anyone";
    if json_out {
        for s in &r.suggestions {
            let mut v = serde_json::to_value(s).map_err(|e| Error::Input(e.to_string()))?;
            v["kind"] = json!("suggestion");
            v["connect"] = json!(format!("rdv contact request {}", s.id));
            terminal::write_line(&mut so, &v)?;
        }
        return terminal::write_line(
            &mut so,
            &json!({
                "kind": "summary",
                "looked_up": r.looked_up,
                "directories": r.directories,
                "suggestions": r.suggestions.len(),
                "known": r.known,
                "invalid": list.invalid,
                "duplicates": list.duplicates,
                "errors": r.errors,
                "sent": 0,
            }),
        );
    }
    use std::io::Write;
    for s in &r.suggestions {
        let who = match &s.name {
            Some(n) => format!("{} <{}>", terminal_safe(n), terminal_safe(&s.address)),
            None => terminal_safe(&s.address),
        };
        writeln!(
            so,
            "{who} appears to have an agent ({}, {}). Connect with: rdv contact request {}",
            s.id, s.fingerprint, s.id
        )?;
        if s.claimants > 1 {
            writeln!(
                so,
                "  ({} agents claim {}: claims are self-asserted, check the fingerprint with them)",
                s.claimants,
                terminal_safe(&s.address)
            )?;
        }
    }
    writeln!(
        so,
        "Looked up {} addresses in {} director{}: {} suggestion{}; {nothing_sent}.",
        r.looked_up,
        r.directories,
        if r.directories == 1 { "y" } else { "ies" },
        r.suggestions.len(),
        if r.suggestions.len() == 1 { "" } else { "s" },
    )?;
    if list.invalid > 0 {
        writeln!(
            so,
            "Skipped {} entries that are not an email or a +phone with its country code.",
            list.invalid
        )?;
    }
    for e in &r.errors {
        writeln!(so, "error: {}", terminal_safe(e))?;
    }
    so.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn canon(l: &ContactList) -> Vec<(Option<&str>, &str)> {
        l.entries
            .iter()
            .map(|e| (e.name.as_deref(), e.address.canon()))
            .collect()
    }

    #[test]
    fn vcard_folded_multiple_cards() {
        let v = "BEGIN:VCARD\r\nVERSION:3.0\r\nFN:Alice\r\n  Liddell\r\nEMAIL;TYPE=INTERNET:Alice@Example.org\r\n\
                 item1.TEL;TYPE=\"cell:x\":+1 (555) 010-\r\n 0001\r\nTEL:555-0100\r\nEND:VCARD\r\n\
                 BEGIN:VCARD\nVERSION:4.0\nN:Doe;John;;;\nEMAIL:mailto:john@doe.test\nTEL;VALUE=uri:tel:+44-20-7946-0000;ext=1\n\
                 EMAIL:alice@example.org\nPHOTO;ENCODING=b:QUJD\n  REVG\nEND:VCARD\n";
        let l = parse_contacts(v.as_bytes(), Format::VCard).unwrap();
        assert_eq!(
            canon(&l),
            vec![
                (Some("Alice Liddell"), "alice@example.org"),
                (Some("Alice Liddell"), "+15550100001"),
                (Some("John Doe"), "john@doe.test"),
                (Some("John Doe"), "+442079460000"),
            ]
        );
        assert_eq!((l.invalid, l.duplicates), (1, 1));
    }

    #[test]
    fn vcard_strict() {
        for bad in [
            "EMAIL:a@b.c\n",
            "BEGIN:VCARD\nEMAIL:a@b.c\n",
            "BEGIN:VCARD\nno colon here\nEND:VCARD\n",
            "BEGIN:VCARD\nEND:VCARD\nEND:VCARD\n",
        ] {
            assert!(
                parse_contacts(bad.as_bytes(), Format::VCard).is_err(),
                "{bad:?}"
            );
        }
        // A nested vCard (2.1 AGENT) is skipped, not merged.
        let v = "BEGIN:VCARD\nFN:A\nAGENT:\nBEGIN:VCARD\nEMAIL:x@y.z\nEND:VCARD\nEMAIL:a@b.c\nEND:VCARD\n";
        let l = parse_contacts(v.as_bytes(), Format::VCard).unwrap();
        assert_eq!(canon(&l), vec![(Some("A"), "a@b.c")]);
        assert!(parse_contacts(&[0xff, 0xfe], Format::VCard).is_err());
    }

    #[test]
    fn csv_headers_and_quotes() {
        let c = "Name,Given Name,Family Name,E-mail 1 - Type,E-mail 1 - Value,Mobile Phone,Notes\r\n\
                 \"Doe, John\",,,* Home,john@doe.test ::: John@Doe.Test,+1 555 0100,\"said \"\"hi\"\"\nthen left\"\r\n\
                 ,Ann,Lee,,ann@lee.test,0044 20,\r\n\
                 \r\n\
                 Bob,,,,not-an-address,,";
        let l = parse_contacts(c.as_bytes(), Format::Csv).unwrap();
        assert_eq!(
            canon(&l),
            vec![
                (Some("Doe, John"), "john@doe.test"),
                (Some("Doe, John"), "+15550100"),
                (Some("Ann Lee"), "ann@lee.test"),
            ]
        );
        assert_eq!((l.invalid, l.duplicates), (2, 1));
        let semi = "name;email\nA;a@b.c\n";
        assert_eq!(
            canon(&parse_contacts(semi.as_bytes(), Format::Csv).unwrap()),
            vec![(Some("A"), "a@b.c")]
        );
    }

    #[test]
    fn csv_strict() {
        for bad in [
            "name,email\n\"A,a@b.c\n",
            "name,email\n\"A\"x,a@b.c\n",
            "name,email\nA\"B,a@b.c\n",
            "name,notes\nA,x\n",
            "",
        ] {
            assert!(
                parse_contacts(bad.as_bytes(), Format::Csv).is_err(),
                "{bad:?}"
            );
        }
        let wide = format!("email{}\n", ",x".repeat(CSV_MAX_FIELDS));
        assert!(parse_contacts(wide.as_bytes(), Format::Csv).is_err());
    }

    #[test]
    fn bounds() {
        let mut c = String::from("email\n");
        for i in 0..=MAX_ADDRESSES {
            c.push_str(&format!("u{i}@x.test\n"));
        }
        let e = parse_contacts(c.as_bytes(), Format::Csv).unwrap_err();
        assert!(e.to_string().contains("more than 50000"), "{e}");
        let big = vec![b'a'; FILE_MAX_BYTES + 1];
        assert!(parse_contacts(&big, Format::Csv).is_err());
        let long = format!("name,email\n{},a@b.c\n", "n".repeat(1000));
        let l = parse_contacts(long.as_bytes(), Format::Csv).unwrap();
        assert_eq!(
            l.entries[0].name.as_ref().unwrap().chars().count(),
            NAME_MAX_CHARS
        );
    }

    #[test]
    fn formats() {
        assert_eq!(detect_format("x.VCF", b""), Format::VCard);
        assert_eq!(detect_format("x.csv", b"BEGIN:VCARD"), Format::Csv);
        assert_eq!(
            detect_format("-", b"\xef\xbb\xbf begin:vcard\n"),
            Format::VCard
        );
        assert_eq!(detect_format("-", b"name,email\n"), Format::Csv);
    }
}
