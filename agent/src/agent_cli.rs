//! Argument definitions of the agent's commands (`rdv init`, `rdv contact`,
//! …). Their logic is in `agent_cmd`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// The public relays the TypeScript reference uses by default.
pub const DEFAULT_RELAYS: [&str; 4] = [
    "wss://nos.lol",
    "wss://relay.primal.net",
    "wss://relay.nostr.net",
    "wss://nostr.oxtr.dev",
];

#[derive(Debug, Args)]
pub struct InitArgs {
    /// An address (email, or +phone with country code) this agent can be
    /// found by; listed on the card. Repeatable.
    #[arg(long = "address", value_name = "ADDRESS")]
    pub addresses: Vec<String>,
    /// An address kept off the card: it opens no topic and finds nothing
    /// (SPEC §4.3). Repeatable.
    #[arg(long = "private-address", value_name = "ADDRESS")]
    pub private_addresses: Vec<String>,
    /// A Nostr relay to listen on (wss://). Repeatable. Default: wss://nos.lol,
    /// wss://relay.primal.net, wss://relay.nostr.net, wss://nostr.oxtr.dev.
    #[arg(long = "relay", value_name = "URL")]
    pub relays: Vec<String>,
    /// Publish the card on the topics of the listed addresses and of the
    /// agent ID, so requesters can fetch it without asking (SPEC §4.4).
    #[arg(long)]
    pub public_pointer: bool,
    /// Inbound policy: prompt (ask the human, the default), allow (grant
    /// every request at tier stranger), block (silence).
    #[arg(long, default_value = "prompt", value_parser = ["prompt", "allow", "block"])]
    pub inbound: String,
    /// An ntfy server to list on the card as a fallback carrier (SPEC §6.3);
    /// the topic is derived from the agent ID.
    #[arg(long, value_name = "URL")]
    pub ntfy: Option<String>,
    /// An MQTT broker (mqtt://host:port) to list on the card as a fallback
    /// carrier; the topic is derived from the agent ID.
    #[arg(long, value_name = "URL")]
    pub mqtt: Option<String>,
    /// A discovery directory to use (SPEC §4.5). Repeatable.
    #[arg(long = "directory", value_name = "URL")]
    pub directories: Vec<String>,
    /// Turn friend suggestions off (SPEC §4.5: on by default).
    #[arg(long)]
    pub no_suggest: bool,
    /// Accept ws:// relays (local tests and development only).
    #[arg(long)]
    pub allow_ws: bool,
    /// Replace the agent in this home with a new key. Its contacts are lost.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Subcommand)]
pub enum AddressCommand {
    /// List an address on the card (or keep it private with --private).
    Add {
        address: String,
        #[arg(long)]
        private: bool,
    },
    /// Remove an address: the card is re-signed and republished on its topic.
    Remove { address: String },
    /// Show this agent's addresses.
    List,
}

#[derive(Debug, Subcommand)]
pub enum RelaysCommand {
    /// Listen on one more relay (the card is re-signed and sent to contacts).
    Add { url: String },
    /// Stop listening on a relay (not the last one).
    Remove { url: String },
    /// Show the relays and their health.
    List,
}

#[derive(Debug, Args)]
pub struct CardArgs {
    /// Show the card as a QR code for exchanging it in person (SPEC §4.4).
    #[arg(long)]
    pub qr: bool,
    #[command(subcommand)]
    pub command: Option<CardCommand>,
}

#[derive(Debug, Subcommand)]
pub enum CardCommand {
    /// Keep someone's card (a file, or - for stdin), for `rdv contact request`.
    Import {
        file: String,
        /// The card came from a QR code or face to face (binding in-person).
        #[arg(long)]
        in_person: bool,
    },
    /// Publish the card on its topics now (needs --public-pointer at init).
    Publish,
}

#[derive(Debug, Args)]
pub struct DiscoverArgs {
    /// An email address, a +phone number, or an agent ID (rdv1:…).
    pub target: String,
}

#[derive(Debug, Subcommand)]
pub enum ContactCommand {
    /// Ask for contact: to an agent ID, an encrypted request to its card;
    /// to an address, a topic probe (SPEC §4.4, §5.1).
    Request {
        /// An email address, a +phone number, or an agent ID (rdv1:…).
        target: String,
        /// A short greeting (public for a probe: SPEC §9).
        #[arg(long, default_value = "")]
        greeting: String,
        /// Your name for whoever answers.
        #[arg(long)]
        label: Option<String>,
    },
    /// Requests waiting for you, and answers to your probes. In text mode
    /// (never with --json) also a new confirm phrase for each request the
    /// MCP server asked you about, for exactly the terms your assistant
    /// asked (the phrase shown last wins).
    Pending,
    /// Grant a pending request (SPEC §5.3). Only you decide this.
    Grant {
        request_id: String,
        /// spouse, family, friend, colleague, business or stranger.
        #[arg(long, default_value = "stranger")]
        tier: String,
        /// Your name for the contact.
        #[arg(long)]
        label: Option<String>,
        /// Do not let the contact propose meetings.
        #[arg(long)]
        no_meetings: bool,
        /// A capability URI the contact may invoke. Repeatable.
        #[arg(long = "invoke", value_name = "URI")]
        invoke: Vec<String>,
        /// The grant-wide rate limit, <n>/<minute|hour|day>.
        #[arg(long, default_value = "100/day")]
        max_frequency: String,
    },
    /// Confirm an answer to your probe after checking its fingerprint
    /// (SPEC §5.3): it becomes a contact, binding claimed.
    Confirm {
        request_id: String,
        /// Which answering agent, when several answered.
        #[arg(long, value_name = "AGENT_ID")]
        agent: Option<String>,
        #[arg(long)]
        label: Option<String>,
    },
    /// Decline a pending request (nothing is sent back).
    Decline {
        request_id: String,
        /// Also block the requester's key.
        #[arg(long)]
        block: bool,
    },
    /// End a contact and tell its agent.
    Revoke { contact: String },
    /// Block an agent: it gets silence from now on.
    Block { agent: String },
    /// Unblock an agent.
    Unblock { agent: String },
    /// Name a contact (or --clear the name).
    Label {
        contact: String,
        label: Option<String>,
        #[arg(long, conflicts_with = "label")]
        clear: bool,
    },
    /// Accept a contact's chain again after it forked (SPEC §6.4).
    Resync { contact: String },
    /// Your contacts.
    List,
    /// Let a contact's agent have every task it may invoke started and
    /// answered without asking you (SPEC §5.5.1): `all` needs you at this
    /// terminal and your owner passphrase (`rdv owner-secret set`); `off`
    /// turns it off. Human-only, like `rdv contact grant`.
    AutoApprove {
        contact: String,
        #[arg(value_parser = ["all", "off"])]
        mode: String,
        /// When it ends: an RFC 3339 time or a duration like 7d.
        #[arg(long)]
        until: Option<String>,
    },
    /// Ask a mailbox whether it has an agent, when topics stayed silent
    /// (SPEC §5.2.1): your gateway mails a signed probe. At most one per
    /// address per 30 days; opt-outs are honored. An answer (SYN-ACK) is a
    /// candidate in `rdv contact pending`: confirm it with `rdv contact
    /// confirm <request-id>`, which sends the ACK. Needs a proved mailbox
    /// (`rdv mailbox add`) and `rdv listen` running to receive the answer.
    ProbeMail {
        /// Their email address.
        address: String,
        /// A short greeting (mailed in the clear).
        #[arg(long, default_value = "")]
        greeting: String,
        /// Your name for whoever answers.
        #[arg(long)]
        label: Option<String>,
        /// Which of your proved mailboxes it goes from (default: the first).
        #[arg(long)]
        from_mailbox: Option<String>,
    },
    /// Invite someone whose address showed no agent (SPEC §5.2.2): your
    /// gateway mails a note from you, disclosed as sent by your assistant,
    /// with a single-use token and an opt-out. Only on your command; one
    /// pending invite per address, then a 30-day cooldown; opt-outs are
    /// permanent.
    Invite {
        /// Their email address.
        address: String,
        /// Where you got the address (stated in the invite).
        #[arg(long)]
        source: String,
        /// A personal note, the invite's first paragraph.
        #[arg(long)]
        note: Option<String>,
        /// Which of your proved mailboxes it goes from (default: the first).
        #[arg(long)]
        from_mailbox: Option<String>,
    },
    /// Record the answer to an invite you sent: accepted (then ask for
    /// contact as usual) or declined (30 days before another).
    InviteStatus {
        /// The invite's id (from `rdv contact invite`).
        invite_id: String,
        #[arg(value_parser = ["accepted", "declined"])]
        status: String,
    },
    /// Answer an invite someone sent you (SPEC §5.2.2): asks the inviter's
    /// agent for contact with the invite's token, so it sees the answer to
    /// its invite. FILE is the invite mail, its RDV/1 block, or the invite's
    /// JSON (`-` for stdin). The inviter's card comes from its agent ID's
    /// topic, or --card.
    AcceptInvite {
        file: String,
        /// The inviter's card (a file), when it is on no topic.
        #[arg(long)]
        card: Option<String>,
        /// A short greeting (inside the encrypted request).
        #[arg(long, default_value = "")]
        greeting: String,
        /// Your name for the inviter.
        #[arg(long)]
        label: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MailboxCommand {
    /// Register one of your mailboxes at a probe gateway (SPEC §5.2.1): it
    /// mails the address a code; type it into `rdv mailbox verify`.
    Add {
        /// Your email address.
        address: String,
        /// The gateway's base URL, e.g. https://gw.example.
        #[arg(long, env = "RDV_GW_URL")]
        gateway: String,
        /// Also list the gateway's address for it on your card, as an email
        /// rendezvous entry (off unless you say so).
        #[arg(long)]
        on_card: bool,
    },
    /// Prove the mailbox with the code the gateway mailed. Prints the mail
    /// rule's integration token (shown once).
    Verify {
        address: String,
        /// The code from the gateway's mail.
        code: String,
    },
    /// Your mailboxes, their gateways and whether they are proved.
    List,
    /// Forget a mailbox (and take it off the card).
    Remove { address: String },
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The contact: its agent ID or your label for it.
    pub contact: String,
    /// A JSON object with a "type", e.g. '{"type":"note/text","text":"hi"}'.
    pub payload: String,
}

#[derive(Debug, Args)]
pub struct InboxArgs {
    /// Wait for new events and print them as they come.
    #[arg(long)]
    pub follow: bool,
    /// Only events after this cursor.
    #[arg(long, default_value_t = 0)]
    pub since: u64,
    /// At most this many events.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}

/// A file path or `-` for stdin.
pub fn read_input(file: &str, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    if file == "-" {
        std::io::stdin()
            .take(max as u64 + 1)
            .read_to_end(&mut buf)?;
    } else {
        std::fs::File::open(PathBuf::from(file))?
            .take(max as u64 + 1)
            .read_to_end(&mut buf)?;
    }
    if buf.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{file}: over {max} bytes"),
        ));
    }
    Ok(buf)
}
