//! Protocol constants, limits and domain-separation strings, each named after
//! the spec section (SPEC.txt rev 3) it comes from. Every other crate reads
//! them from here.

/// §4.2: prefix of an agent ID.
pub const AGENT_ID_PREFIX: &str = "rdv1:";
/// §4.2: 32-byte key in unpadded base32 is 52 characters.
pub const AGENT_ID_B32_LEN: usize = 52;

/// §4.6: domain separation for every Ed25519 signature.
pub const SIG_PREFIX: &[u8] = b"rdv1/sig:";
/// §4.6: canonical JSON nesting limit (a top-level container is depth 1).
pub const CANON_MAX_DEPTH: usize = 32;
/// §4.6: integers only, and only those every JSON implementation holds exactly.
pub const CANON_MAX_SAFE_INT: i64 = (1 << 53) - 1;

/// §4.6, §5.1: the longest contact point (or `to_hint`) we read: RFC 5321
/// paths are at most 256 octets, so 320 leaves room and refuses nothing real.
pub const ADDRESS_MAX_LEN: usize = 320;

/// §4.4: discovery topic prefix and length.
pub const DTOPIC_PREFIX: &[u8] = b"rdv1/disc:";
/// §4.4 (issue #62): agent-ID topic prefix.
pub const IDTOPIC_PREFIX: &[u8] = b"rdv1/id:";
/// §4.4: topics are the first 26 base32 characters of the hash.
pub const TOPIC_LEN: usize = 26;

/// §4.3: at most 32 capability URIs of at most 200 characters.
pub const CARD_MAX_CAPABILITIES: usize = 32;
pub const CARD_MAX_CAPABILITY_LEN: usize = 200;
/// §4.3: a card lists 1 to 16 nostr relays.
pub const CARD_MIN_RELAYS: usize = 1;
pub const CARD_MAX_RELAYS: usize = 16;
/// §4.3: a relay URL is at most 256 characters (our bound; the spec gives none).
pub const RELAY_URL_MAX_LEN: usize = 256;
/// §4.3 (issue #45): a card's canonical JSON is at most 16 KiB.
pub const CARD_MAX_BYTES: usize = 16 * 1024;
/// §4.3 (issue #45): a card-update's `created` at most 10 minutes ahead.
pub const CARD_UPDATE_MAX_AHEAD_SECS: i64 = 10 * 60;

/// §5.1: a request's greeting is at most 1000 characters (our bound; the
/// spec gives none, and a probe's greeting is public, §9, so keep it short).
pub const REQUEST_GREETING_MAX: usize = 1000;

/// §5.3: trust tiers.
pub const TIERS: [&str; 6] = [
    "spouse",
    "family",
    "friend",
    "colleague",
    "business",
    "stranger",
];
/// §5.3: invoke keys are https URIs of at most 200 characters, at most 32.
pub const INVOKE_MAX_KEYS: usize = 32;
pub const INVOKE_MAX_URI_LEN: usize = 200;
/// §5.3: capability URIs of the meetings extension.
pub const EXT_MEETINGS: &str = "https://rendezvous.nesher.co/ext/meetings/v1";
pub const EXT_MEETING_CANCEL: &str = "https://rendezvous.nesher.co/ext/meeting-cancel/v1";
/// §7.8: the groups extension, never a key of a join's invoke.
pub const EXT_GROUPS: &str = "https://rendezvous.nesher.co/ext/groups/v1";
/// §5.3: a reverse grant's `ts` at most this far ahead (reference: 5 minutes).
pub const GRANT_MAX_AHEAD_SECS: i64 = 5 * 60;

/// §5.2.1: probes expire after 14 days.
pub const PROBE_LIFETIME_SECS: i64 = 14 * 24 * 3600;
/// §5.2.1 (probe gateway, issue #4): a probe's `ts` at most 5 minutes ahead
/// of the gate's clock (our bound, as for envelopes, §6.4).
pub const PROBE_MAX_AHEAD_SECS: i64 = 5 * 60;
/// §5.2.1: at most one probe per address per 30 days (the default; configurable).
pub const PROBE_PER_ADDRESS_INTERVAL_SECS: i64 = 30 * 24 * 3600;
/// §5.2.2: 30-day cooldown on an invite met by silence or a decline.
pub const INVITE_COOLDOWN_SECS: i64 = 30 * 24 * 3600;
/// §5.2.1: subject markers and headers.
pub const PROBE_SUBJECT_MARKER: &str = "[RDV-PROBE]";
pub const PROBE_ACK_SUBJECT_MARKER: &str = "[RDV-PROBE-ACK]";
pub const INVITE_SUBJECT_MARKER: &str = "[RDV-INVITE]";
pub const PROBE_HEADER: &str = "X-Rdv-Probe";
pub const INVITE_HEADER: &str = "X-Rdv-Invite";
/// §5.2.1 ACK by mail (issue #4, docs/conformance.md): the requester echoes
/// the SYN-ACK's cookie in an `rdv/probe-echo` under these markers.
pub const ACK_SUBJECT_MARKER: &str = "[RDV-ACK]";
pub const ACK_HEADER: &str = "X-Rdv-Ack";
/// §5.2.2 (probe gateway, issue #4): HKDF info, under the never-rotated
/// address key, of `k_optout`: an opt-out token's `H = HMAC(k_optout,
/// canon(address))[..16]` (RFC 8058 `List-Unsubscribe`).
pub const GW_OPTOUT_TOKEN_INFO: &[u8] = b"rdv1/gw/optout-token";
/// §5.2.2 (probe gateway, issue #4): HKDF info, under the address key, of
/// `k_tag`: an opt-out token's check `T = HMAC(k_tag, H)[..5]`.
pub const GW_OPTOUT_TAG_INFO: &[u8] = b"rdv1/gw/optout-tag";
/// §5.2.2 (probe gateway, issue #4): HKDF info, under the address key, of
/// the key that hashes stored addresses (per-address send limits), so none
/// is kept in the clear.
pub const GW_ADDRESS_HASH_INFO: &[u8] = b"rdv1/gw/address-hash";
/// §5.2.1 "Verification" (probe gateway): HKDF info prefix of the
/// per-agent cookie key, `K_agent = HKDF-SHA256(master, prefix ‖ agent ID)`.
pub const GW_COOKIE_KEY_INFO: &[u8] = b"rdv1/gw/cookie-key:";
/// Probe gateway mailbox proof: domain separation of the stored hash of a
/// proof code (the code itself is never kept).
pub const GW_CODE_HASH_DOMAIN: &[u8] = b"rdv1/gw/code";
/// Probe gateway API (docs/probe-gateway.md "Signed requests"): the header
/// carrying an agent's signed request (lowercase; HTTP names are
/// case-insensitive).
pub const GW_AUTH_HEADER: &str = "x-rdv-auth";
/// Probe gateway API (docs/probe-gateway.md "Signed requests"): the `type`
/// of the signed document in [`GW_AUTH_HEADER`].
pub const GW_REQUEST_TYPE: &str = "rdv/gw-request";
/// §5.2.1: the fences around the machine part.
pub const BLOCK_BEGIN: &str = "---BEGIN RDV/1---";
pub const BLOCK_END: &str = "---END RDV/1---";
/// §5.2.1: a probe-ack cookie is 1 to 128 printable ASCII characters (our
/// bound: the spec says only "HMAC…, truncated").
pub const PROBE_COOKIE_MAX_LEN: usize = 128;
/// §5.2.2: an invite token is 1 to 128 printable ASCII characters (our bound).
pub const INVITE_TOKEN_MAX_LEN: usize = 128;
/// §5.2.1: a raw mail message is at most 512 KiB before we parse it (our
/// bound: a 64 KiB block, base64 or quoted-printable, plus text, fits).
pub const MAIL_MAX_BYTES: usize = 512 * 1024;
/// RFC 2045 §6.7: quoted-printable and base64 lines are at most 76 characters.
pub const MIME_LINE_MAX: usize = 76;
/// §5.2.1: largest RDV/1 block payload we accept (a request carries a ≤16 KiB card).
pub const BLOCK_MAX_BYTES: usize = 64 * 1024;

/// §6.2: Nostr kind for envelopes, discovery probes and public pointers.
pub const NOSTR_KIND: u16 = 30417;
/// §6.2: HKDF info of the carrier key.
pub const NOSTR_CARRIER_INFO: &[u8] = b"rdv1/nostr-carrier";
/// §6.2: `d` tag prefix of a public-pointer card.
pub const NOSTR_CARD_D_PREFIX: &str = "rdv1/card:";

/// §6.4: envelope cipher suite name.
pub const ENVELOPE_ALG: &str = "x25519+aes256gcm";
/// §6.4: HKDF info of the envelope key.
pub const ENVELOPE_HKDF_INFO: &[u8] = b"rdv1/envelope";
/// §6.4: plaintext cap, 32 KiB.
pub const ENVELOPE_MAX_PLAINTEXT: usize = 32 * 1024;
/// §6.4: the GCM tag appended to the ciphertext.
pub const GCM_TAG_LEN: usize = 16;
/// §6.4: ciphertext cap.
pub const ENVELOPE_MAX_CIPHERTEXT: usize = ENVELOPE_MAX_PLAINTEXT + GCM_TAG_LEN;
/// §6.4: cap on the ciphertext's base64 length, checked before anything else.
pub const ENVELOPE_MAX_CIPHERTEXT_B64: usize = ENVELOPE_MAX_CIPHERTEXT.div_ceil(3) * 4;
/// §6.4: whole-envelope JSON cap (about 45 KB sealed; bounded before parsing).
pub const ENVELOPE_MAX_BYTES: usize = 48 * 1024;
/// §6.4: the ttl cap, 7 days, and the default.
pub const ENVELOPE_MAX_TTL_SECS: i64 = 7 * 24 * 3600;
pub const ENVELOPE_DEFAULT_TTL: &str = "48h";
/// §6.4: `created` at most 5 minutes ahead of the receiver's clock.
pub const ENVELOPE_MAX_AHEAD_SECS: i64 = 5 * 60;
/// Our senders' bound (§6.4): how far a burst may push a channel's `created`
/// ahead of the clock to keep each envelope newer than the last (see
/// `Outbound::next_created`), well inside the 5 minutes receivers allow.
pub const ENVELOPE_CREATED_MAX_LEAD_SECS: i64 = 60;

/// §6.4: fork detection keeps the hashes of the last 8 accepted envelopes.
pub const CHANNEL_RECENT_HASHES: usize = 8;
/// §7: out-of-order buffering, 16 peers × 64 envelopes.
pub const CHANNEL_MAX_BUFFERED_PEERS: usize = 16;
pub const CHANNEL_MAX_BUFFERED_PER_PEER: usize = 64;
/// §7: the outbox a sender replays from on `rdv/resend`.
pub const CHANNEL_OUTBOX: usize = 64;
/// §6.4.1: at most 3 restore notices per sender per day.
pub const RESTORED_MAX_PER_DAY: usize = 3;
/// §6.4.1: a notice's `backup_created` and an ack's `floor` are written with
/// exactly this many fractional digits (milliseconds, `…T08:00:00.000Z`).
pub const RESTORED_TIME_FRACTION_DIGITS: usize = 3;
/// §6.4.1: an ack's `floor` is "just before" the first resent envelope's
/// `created`: this many milliseconds before it.
pub const RESTORED_FLOOR_BEFORE_MS: i64 = 1;

/// §7.8: a group has at most 16 members.
pub const GROUP_MAX_MEMBERS: usize = 16;
/// §7.8.1: a state is at most 8 KiB; member names ≤ 64, group name 1–100.
pub const GROUP_STATE_MAX_BYTES: usize = 8 * 1024;
pub const GROUP_MEMBER_NAME_MAX: usize = 64;
pub const GROUP_NAME_MAX: usize = 100;
/// §7.8.2: greeting ≤ 280, invite expires ≤ 14 days ahead, join ≤ 24 KiB.
pub const GROUP_GREETING_MAX: usize = 280;
pub const GROUP_INVITE_MAX_EXPIRY_SECS: i64 = 14 * 24 * 3600;
pub const GROUP_JOIN_MAX_BYTES: usize = 24 * 1024;
/// §7.8.3: a message header ≤ 4 KiB, its body ≤ 24 KiB, 1–15 private recipients.
pub const GROUP_MSG_HEADER_MAX_BYTES: usize = 4 * 1024;
pub const GROUP_MSG_BODY_MAX_BYTES: usize = 24 * 1024;
pub const GROUP_MSG_MAX_PRIVATE_TO: usize = 15;
/// §7.8.3: a heads entry carries the first 16 hex digits of a header hash.
pub const GROUP_HEAD_HASH_LEN: usize = 16;

/// §4.5 (issue #3): the directory's OPRF suite (RFC 9497 VOPRF, P256-SHA256).
pub const DIR_OPRF_SUITE: &str = "P256-SHA256";
/// §4.5 (issue #3): the OPRF mode, verifiable so a per-user key is detectable.
pub const DIR_OPRF_MODE: &str = "voprf";
/// §4.5 (issue #3): `lookup_id = SHA-256(DIR_LOOKUP_PREFIX ‖ y)`.
pub const DIR_LOOKUP_PREFIX: &[u8] = b"rdv1/dir/lookup:";
/// §4.5 (issue #3): `seal_key = HKDF-SHA256(ikm = y, info = DIR_SEAL_INFO)`.
pub const DIR_SEAL_INFO: &[u8] = b"rdv1/dir/seal";
/// §4.5 (issue #3): `type` of a signed listing and of a signed removal.
pub const DIR_LISTING_TYPE: &str = "rdv/dir-listing";
pub const DIR_REMOVE_TYPE: &str = "rdv/dir-remove";
/// §4.5 (issue #3): a sealed card's plaintext is padded with spaces to a
/// multiple of this, so listing sizes do not tell cards apart.
pub const DIR_SEAL_PAD: usize = 1024;
/// §4.5 (issue #3): a listing document is at most 24 KiB (a 16 KiB card,
/// padded, sealed and base64-encoded, plus the signed header).
pub const DIR_LISTING_MAX_BYTES: usize = 24 * 1024;
/// §4.5 (issue #3): a listing lives at most 30 days past its `updated`.
pub const DIR_LISTING_MAX_LIFETIME_SECS: i64 = 30 * 24 * 3600;
/// §4.5 (issue #3): `updated` at most 5 minutes ahead of the server clock.
pub const DIR_MAX_AHEAD_SECS: i64 = 5 * 60;

/// §7.6.2: metadata key saying a gate is open ("human").
pub const TASK_AWAITING_KEY: &str = "https://rendezvous.nesher.co/ext/tasks/v1/awaiting";
/// §7.6.2, §7.4: a task's expires defaults to 48 hours, clamped to 7 days.
pub const TASK_DEFAULT_EXPIRES_SECS: i64 = 48 * 3600;
pub const TASK_MAX_EXPIRES_SECS: i64 = 7 * 24 * 3600;
/// §7.4: open tasks per peer, across all capabilities (reference: 32).
pub const TASK_MAX_OPEN_PER_PEER: usize = 32;
/// §5.3, §7.4: max_open per capability when the grant gives none.
pub const TASK_DEFAULT_MAX_OPEN: u64 = 4;
/// §7.4: tasks waiting for the human, per peer and in all.
pub const TASK_MAX_WAITING_PER_PEER: usize = 4;
pub const TASK_MAX_WAITING_TOTAL: usize = 64;
/// §7.4 per task: task/inputs (§7.6.2), status updates processed,
/// artifacts, artifact chunks (seen messageIds and replies: the A2A_*
/// bounds above).
pub const TASK_MAX_INPUTS: u32 = 8;
pub const TASK_MAX_STATUS_UPDATES: u32 = 64;
pub const TASK_MAX_ARTIFACTS: usize = 8;
pub const TASK_MAX_ARTIFACT_CHUNKS: u32 = 64;
/// §7.4: finished tasks and tombstones are pruned after 30 days.
pub const TASK_PRUNE_AFTER_SECS: i64 = 30 * 24 * 3600;

/// §7.6.4: request/v1 data: at most 4 levels of nesting, 256 values,
/// strings of at most 2,000 characters, keys of 1–64 characters, at most
/// 8,192 characters as JSON.
pub const REQUEST_DATA_MAX_DEPTH: usize = 4;
pub const REQUEST_DATA_MAX_VALUES: usize = 256;
pub const REQUEST_DATA_MAX_STRING_CHARS: usize = 2_000;
pub const REQUEST_DATA_MIN_KEY_CHARS: usize = 1;
pub const REQUEST_DATA_MAX_KEY_CHARS: usize = 64;
pub const REQUEST_DATA_MAX_JSON_CHARS: usize = 8_192;

/// §5.3 (b): gross abuse is more rejections for one capability's limit in
/// its window than this many times the limit…
pub const ABUSE_LIMIT_FACTOR: u64 = 3;
/// …or more than this many per-capability rejections in 24 hours.
pub const ABUSE_MAX_REJECTIONS_PER_DAY: usize = 50;
/// §5.3 (b): the 24-hour window of the all-capabilities figure.
pub const ABUSE_DAY_SECS: i64 = 24 * 3600;

/// §5.5: domain separation of the start- and release-gate digests.
pub const TASK_START_GATE_DIGEST_PREFIX: &[u8] = b"rdv1/task-gate/start:";
pub const TASK_RELEASE_GATE_DIGEST_PREFIX: &[u8] = b"rdv1/task-gate/release:";
/// §5.5.1: domain separation of the MAC over an auto-approve setting.
pub const AUTO_APPROVE_MAC_PREFIX: &[u8] = b"rdv1/auto-approve:";
/// §7.7 (the owner's direct-transfer setting, "never changed by a model or
/// a peer"): the MAC key over the stored setting is HMAC-SHA256 of this
/// string under the agent's secret key, so a process that can write the
/// home but not read the key cannot turn the setting on.
pub const DIRECT_TRANSFER_MAC_KEY_INFO: &[u8] = b"rdv1/direct-transfer-mac-key";
/// §5.5.1 (reference): the audit log keeps 1000 lines.
pub const AUDIT_LOG_MAX_LINES: usize = 1000;
/// §5.5.1 (reference): owner-passphrase misses before a lockout.
pub const OWNER_SECRET_MAX_MISSES: u32 = 3;

// ---- A2A mapping and meetings (§7.1–§7.5) ---------------------------------

/// §7.1: the payload types that carry A2A v0.3 objects.
pub const A2A_MESSAGE_TYPE: &str = "a2a/message";
pub const A2A_TASK_UPDATE_TYPE: &str = "a2a/task-update";
/// §7.6.1: the third payload type, general tasks only.
pub const A2A_ARTIFACT_UPDATE_TYPE: &str = "a2a/artifact-update";
/// §7.5 rule 2: the card's capabilities for the protocol and A2A itself.
pub const CAP_RDV_V1: &str = "rdv/v1";
pub const CAP_A2A_03: &str = "a2a/0.3";
/// §7.6: the tasks extension (lifecycle of general tasks).
pub const EXT_TASKS: &str = "https://rendezvous.nesher.co/ext/tasks/v1";
/// §7.6.4: the general capability.
pub const EXT_REQUEST: &str = "https://rendezvous.nesher.co/ext/request/v1";
/// §7.7: the files extension (a profile extension on FilePart).
pub const EXT_FILES: &str = "https://rendezvous.nesher.co/ext/files/v1";
// ---- Files (§7.7) -----------------------------------------------------------

/// §7.7: a URL (uri, mirrors) is at most 2,048 characters, https, with a
/// host and no userinfo.
pub const FILES_URL_MAX_CHARS: usize = 2_048;
/// §7.7: mirrors lists at most 8 other URLs for the same bytes.
pub const FILES_MAX_MIRRORS: usize = 8;
/// §7.7: p2p names at most 8 transfer protocols, each `<name>/<version>`.
pub const FILES_MAX_P2P: usize = 8;
/// §7.7: the one blob cipher, its key and nonce lengths, and its tag.
pub const FILES_ENC_ALG: &str = "aes256gcm";
pub const FILES_KEY_LEN: usize = 32;
pub const FILES_NONCE_LEN: usize = 12;
pub const FILES_TAG_LEN: usize = 16;
/// §7.7: the associated data of a file's AES-256-GCM encryption.
pub const FILES_BLOB_AAD: &[u8] = b"rdv1/blob";
/// §7.7, §5.6 rule 5: a display name is kept to 255 characters (our bound).
pub const FILES_NAME_MAX_CHARS: usize = 255;
/// §7.7: a bare type/subtype, each at most 127 characters (RFC 6838).
pub const FILES_MIME_PART_MAX_CHARS: usize = 127;
/// §7.7 (reference, NOTES 77): the receiver's own cap on a fetched file.
pub const FILES_FETCH_MAX_BYTES: u64 = 25 * 1024 * 1024;
/// §7.7: at most 3 redirects per fetch.
pub const FILES_FETCH_MAX_REDIRECTS: usize = 3;
/// §7.7 (reference): fetched files are kept under the home in
/// `files/incoming/<task>/`, each name ending in this suffix.
pub const FILES_QUARANTINE_DIR: &str = "files/incoming";
pub const FILES_QUARANTINE_SUFFIX: &str = ".quarantine";
/// §7.7 Direct transfer: the payload type of the negotiation messages.
pub const TRANSFER_TYPE: &str = "rdv/transfer";
/// §7.7: 16 messages per transfer (the 17th aborts it).
pub const TRANSFER_MAX_MESSAGES: u32 = 16;
/// §7.7: `data` is at most 16 KiB as canonical JSON, nested at most 16 deep.
pub const TRANSFER_MAX_DATA_BYTES: usize = 16 * 1024;
pub const TRANSFER_MAX_DEPTH: usize = 16;
/// §7.7: a propose names 1 to 8 protocols.
pub const TRANSFER_MAX_PROTOCOLS: usize = 8;
/// §7.7: an abort's reason is at most 200 characters, display only.
pub const TRANSFER_REASON_MAX_CHARS: usize = 200;

/// §7.5 rule 5: the metadata key of the unsupported reply.
pub const A2A_UNSUPPORTED_KEY: &str = "https://rendezvous.nesher.co/ext/meetings/v1/unsupported";
/// §7.6.2: the metadata key of a machine reason on a status update.
pub const A2A_TASKS_REASON_KEY: &str = "https://rendezvous.nesher.co/ext/tasks/v1/reason";
/// §7.6.1: a message carries at most 8 parts.
pub const A2A_MAX_PARTS: usize = 8;
/// §7.4: a text part is at most 16,000 characters.
pub const A2A_TEXT_MAX_CHARS: usize = 16_000;
/// §7.4: inline file bytes at most 16 KiB (base64 of it, rounded up).
pub const A2A_INLINE_FILE_MAX_BYTES: usize = 16 * 1024;
/// §4.3, §7.5: a message lists at most as many extension URIs as a card.
pub const A2A_MAX_EXTENSIONS: usize = CARD_MAX_CAPABILITIES;
/// §7.6.1 referenceTaskIds: at most 8 (our bound; the spec gives none).
pub const A2A_MAX_REFERENCE_TASKS: usize = 8;
/// §7.5 rule 5, §7.4: unsupported replies, and answers for a finished
/// task, at most 8 per task each.
pub const A2A_MAX_REPLIES_PER_TASK: u32 = 8;
/// §7.4: seen messageIds per task, at most 64.
pub const A2A_MAX_SEEN_PER_TASK: usize = 64;

/// §7.2: a slot is at most 12 hours long.
pub const MEETING_SLOT_MAX_SECS: i64 = 12 * 3600;
/// §7.2: expires defaults to 48 hours and is clamped to 7 days.
pub const MEETING_DEFAULT_EXPIRY_SECS: i64 = 48 * 3600;
pub const MEETING_MAX_EXPIRY_SECS: i64 = 7 * 24 * 3600;
/// §7.3: an accepter keeps its hold this long past expires (reference: 24 h).
pub const MEETING_HOLD_GRACE_SECS: i64 = 24 * 3600;
/// §7.3: the third offer is the last; its receiver accepts or declines.
pub const MEETING_MAX_OFFERS: usize = 3;
/// §7.3 reference policy: offer (and counter with) up to 3 slots.
pub const MEETING_POLICY_SLOTS: usize = 3;
/// §7.2: slots in one offer, at most 8 (our bound; the spec gives none).
pub const MEETING_MAX_SLOTS: usize = 8;
/// §7.4: tasks per peer (reference: 32), finished ones pruned after 30 days.
pub const MEETING_MAX_TASKS_PER_PEER: usize = 32;
pub const MEETING_PRUNE_AFTER_SECS: i64 = 30 * 24 * 3600;
/// §7.2, §5.6: a decline or cancel reason, and a place, are display text of
/// at most 200 characters (our bound).
pub const MEETING_TEXT_MAX_CHARS: usize = 200;
/// §5.5: domain separation of the digest of a meeting step the human is
/// shown (peer, contextId, taskId, slot, stage, and the gate's nonce); its
/// confirm code is bound to that digest.
pub const MEETING_GATE_DIGEST_PREFIX: &[u8] = b"rdv1/meeting-gate:";
