//! The `rdv` command line: argument definitions only; each group's logic
//! lives in its own module.

use clap::{Args, Parser, Subcommand};

/// rdv: the Rendezvous agent for people at a terminal.
///
/// Rendezvous lets one person's AI agent find, ask consent from, and talk
/// end-to-end encrypted with another person's agent.
#[derive(Debug, Parser)]
#[command(name = "rdv", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Which home, and how to print.
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// The agent's home directory (default: $RDV_HOME, else
    /// ~/.rendezvous/<profile>).
    #[arg(long, global = true, env = "RDV_HOME")]
    pub home: Option<std::path::PathBuf>,
    /// The profile, a home under ~/.rendezvous (default: $RDV_PROFILE, else
    /// "default").
    #[arg(long, global = true, env = "RDV_PROFILE")]
    pub profile: Option<String>,
    /// Print one JSON object per line (peer-written text always inside
    /// {"untrusted_peer_text": …}).
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create this profile's agent: a new key, its addresses and relays,
    /// and its signed card (SPEC §4.1–§4.3).
    Init(crate::agent_cli::InitArgs),
    /// The addresses this agent can be found by (SPEC §4.4).
    #[command(subcommand)]
    Address(crate::agent_cli::AddressCommand),
    /// The Nostr relays this agent listens on (SPEC §6.2).
    #[command(subcommand)]
    Relays(crate::agent_cli::RelaysCommand),
    /// Show this agent's card (--qr for a terminal QR code), publish it, or
    /// import someone else's (SPEC §4.3, §4.4).
    Card(crate::agent_cli::CardArgs),
    /// Find an agent by email, +phone or agent ID: public pointers on the
    /// relays, DNS TXT, and the configured directories (SPEC §4.4, §4.5).
    #[command(after_help = "\
DNS (SPEC §4.4): for an email, the TXT records of _agent.<domain> of the form \
rdv=rdv1:… name the domain's agents; each one's card is fetched from its ID \
topic and kept (binding dns) only if it carries that ID.

The resolver is the system's (/etc/resolv.conf). RDV_DNS_SERVER=IP[:PORT] asks \
that server instead (UDP, then TCP; port 53 by default); RDV_DNS_SERVER=off \
skips DNS.")]
    Discover(crate::agent_cli::DiscoverArgs),
    /// Friend suggestions (SPEC §4.5): look your own contacts file up in the
    /// directories, locally; nothing is sent. --on / --off switch them.
    Suggest(crate::suggest::SuggestArgs),
    /// Contacts and consent: request, pending, grant, confirm, decline,
    /// revoke, block, label, resync, list (SPEC §5).
    #[command(subcommand)]
    Contact(crate::agent_cli::ContactCommand),
    /// Your mailboxes at a probe gateway (SPEC §5.2.1): add (the gateway
    /// mails a code), verify, list, remove. `rdv listen` reads what arrives.
    #[command(subcommand)]
    Mailbox(crate::agent_cli::MailboxCommand),
    /// Send a contact a JSON payload, end-to-end encrypted (SPEC §6.4).
    Send(crate::agent_cli::SendArgs),
    /// What the agent received and decided, oldest first (--follow waits
    /// for more).
    Inbox(crate::agent_cli::InboxArgs),
    /// Run the agent: subscribe on every carrier, answer probes by policy,
    /// gate and order inbound, retry deliveries. Stops on Ctrl-C.
    Listen,
    /// Identity, relays and their health, contacts, pending requests, and
    /// whether a process is listening.
    Status,
    /// The walk-through against a running suite (`rdv-suite`): two agents,
    /// Alice's and Bob's, list, look up, probe, grant, confirm and talk,
    /// each step shown as the command a person would type and its output.
    Demo(crate::demo::DemoArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or
    /// powershell (e.g. `rdv completions bash > /etc/bash_completion.d/rdv`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages: rdv.1 and one page per subcommand (rdv-contact.1,
    /// rdv-contact-grant.1, …) into a folder (e.g. /usr/local/share/man/man1).
    Man {
        /// The folder to write into (created if missing).
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
    },
    /// Wire-format conformance commands, for testing another implementation
    /// against this one byte for byte.
    ///
    /// Each reads JSON on stdin where it takes a document and writes JSON on
    /// stdout (for `canon`, the exact canonical bytes). On invalid input it
    /// exits 1 with one line {"error": "..."} on stderr and nothing on stdout.
    #[command(subcommand)]
    Proto(ProtoCommand),
    /// Discovery directories (SPEC §4.5): list this agent (list-me), withdraw
    /// it (unlist); or publish, remove or look up from a seed file.
    #[command(subcommand)]
    Directory(crate::directory_cmd::DirectoryCommand),
    /// Try a relay bridge, ntfy server or MQTT broker (SPEC §6.3): publish
    /// a message, or print a topic's messages one JSON object per line.
    #[command(subcommand)]
    Bridge(crate::bridge_cmd::BridgeCommand),
    /// Try a probe gateway (SPEC §5.2.1, §5.2.2): prove your mailbox, read
    /// the probes and invites that reach it, ask whether someone's mailbox
    /// has an agent, answer, confirm, invite. Prints JSON.
    Gateway(crate::gateway_cmd::GatewayArgs),
    /// An encrypted backup of this agent (create), or an agent restored
    /// from one into a new home, its contacts told (SPEC §6.4.1).
    #[command(subcommand)]
    Backup(crate::backup_cmd::BackupCommand),
    /// General tasks with a contact (SPEC §7.6): list, status, read,
    /// request, input, cancel; and the gates only you pass: approve,
    /// release (with the code `rdv task list` shows), decline, submit.
    #[command(subcommand)]
    Task(crate::task_cmd::TaskCommand),
    /// The owner passphrase that turns auto-approve on (SPEC §5.5.1): set
    /// (interactive terminal only), reset.
    #[command(subcommand)]
    OwnerSecret(crate::task_cmd::OwnerSecretCommand),
    /// The audit log of every gate passed without asking you (SPEC §5.5.1).
    Audit(crate::task_cmd::AuditArgs),
    /// Files in tasks (SPEC §7.7): prepare one of yours (encrypted; nothing
    /// is sent), list, fetch a task's files into the quarantine, and the
    /// direct-transfer setting (only you, at your terminal).
    #[command(subcommand)]
    File(crate::file_cmd::FileCommandArgs),
    /// Meetings with a contact (SPEC §7.2–§7.4): propose, list, confirm
    /// (only you, with the code shown for that meeting), cancel, calendar.
    #[command(subcommand)]
    Dinner(crate::meeting_cmd::DinnerCommand),
    /// Serve MCP on stdio (the same server as `rdv-mcp`): give an assistant
    /// this agent, with consent kept with you (SPEC §5.5, §13).
    Mcp(crate::mcp::McpArgs),
}

#[derive(Debug, Subcommand)]
pub enum ProtoCommand {
    /// Print the canonical JSON (§4.6) of the JSON on stdin, with no newline.
    Canon,
    /// Derive the agent ID, fingerprint and public keys from a seed.
    Keygen(SeedArg),
    /// Discovery topic of an address (email or +phone), or of an agent ID.
    Topic(TopicArgs),
    /// Sign the JSON object on stdin (which has no `sig`); print it canonical.
    Sign(SeedArg),
    /// Verify a signed document of the given kind; print {"ok", "hash"}.
    Verify(VerifyArgs),
    /// Seal the payload object on stdin into a signed envelope (§6.4).
    Seal(SealArgs),
    /// Verify and decrypt the envelope on stdin.
    Open(OpenArgs),
    /// Wrap an envelope (or, with --card, a card) in a signed Nostr event (§6.2).
    NostrEvent(NostrEventArgs),
    /// Verify a Nostr event's id and signature and the §6.2 mapping.
    NostrVerify,
    /// Write the deterministic test vectors to a directory.
    Vectors(VectorsArgs),
}

#[derive(Debug, Args)]
pub struct SeedArg {
    /// 32-byte Ed25519 seed as 64 lowercase hex characters.
    #[arg(long)]
    pub seed: String,
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct TopicArgs {
    /// An email address or a +-led phone number: prints {"canon", "dtopic"}.
    #[arg(long)]
    pub address: Option<String>,
    /// An agent ID (rdv1:…): prints {"idtopic"}.
    #[arg(long)]
    pub id: Option<String>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// card, contact-request, contact-grant, revoke, envelope, group-state,
    /// group-invite, group-join, group-leave or group-msg-header.
    #[arg(long)]
    pub kind: String,
    /// The time to check expiry against (RFC 3339, Z); default: the clock.
    #[arg(long)]
    pub now: Option<String>,
}

#[derive(Debug, Args)]
pub struct SealArgs {
    /// The sender's seed (64 lowercase hex).
    #[arg(long)]
    pub seed: String,
    /// The recipient's agent ID; its encryption key comes from the ID.
    #[arg(long)]
    pub to: String,
    /// This envelope's sequence number in the direction (1 for the first).
    #[arg(long)]
    pub seq: u64,
    /// Hash of the previous envelope in the direction (omit for seq 1).
    #[arg(long)]
    pub prev: Option<String>,
    /// Creation time (RFC 3339, Z); default: the clock.
    #[arg(long)]
    pub created: Option<String>,
    /// Time to live, <n><s|m|h|d>, at most 7d.
    #[arg(long, default_value = rdv_proto::consts::ENVELOPE_DEFAULT_TTL)]
    pub ttl: String,
    /// Test vectors only: the ephemeral X25519 secret (64 hex). Never reuse.
    #[arg(long, requires = "nonce")]
    pub ephemeral_seed: Option<String>,
    /// Test vectors only: the AES-GCM nonce (24 hex). Never reuse.
    #[arg(long, requires = "ephemeral_seed")]
    pub nonce: Option<String>,
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// The recipient's seed (64 lowercase hex).
    #[arg(long)]
    pub seed: String,
    /// The receiver's clock (RFC 3339, Z); default: the system clock.
    #[arg(long)]
    pub now: Option<String>,
}

#[derive(Debug, Args)]
pub struct NostrEventArgs {
    /// The agent's seed; the event is signed with its carrier key (§6.2).
    #[arg(long)]
    pub seed: String,
    /// The event's created_at (Unix seconds); default: the clock (for a
    /// card, never earlier than the card's created).
    #[arg(long)]
    pub created_at: Option<u64>,
    /// Stdin is a card: build the public-pointer event on --topic.
    #[arg(long, requires = "topic")]
    pub card: bool,
    /// The dtopic or idtopic the card is published on.
    #[arg(long, requires = "card")]
    pub topic: Option<String>,
}

#[derive(Debug, Args)]
pub struct VectorsArgs {
    /// Directory to write the JSON files to (e.g. docs/test-vectors).
    #[arg(long)]
    pub out: std::path::PathBuf,
}
