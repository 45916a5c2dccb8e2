//! The unsigned payloads peers send inside envelopes: rdv/restored and its
//! ack (§6.4.1), rdv/resend (§7), rdv/group-msg (§7.8.3) and rdv/card-update
//! (§4.3). The first byte picks the parser. Nothing may panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use rdv_proto::doc::card::{Card, CardBuilder};
use rdv_proto::doc::card_update::check_card_update;
use rdv_proto::doc::group_msg::parse_group_msg;
use rdv_proto::doc::restored::{Restored, RestoredAck};
use rdv_proto::time::parse_time;
use rdv_proto::{AgentKey, canon, channel};

static KEY: LazyLock<AgentKey> = LazyLock::new(|| AgentKey::from_seed([1; 32]));
static HELD: LazyLock<Card> = LazyLock::new(|| {
    let created = parse_time("t", "2026-10-08T00:00:00Z").expect("fixed time");
    let doc = CardBuilder::new(created, vec!["wss://relay.example".into()]).sign(&KEY).expect("card");
    Card::parse_signed(&doc, false).expect("valid card")
});

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let Ok(v) = canon::parse(rest, 64 * 1024) else { return };
    match sel % 5 {
        0 => drop(Restored::parse(&v)),
        1 => drop(RestoredAck::parse(&v)),
        2 => drop(channel::parse_resend(&v)),
        3 => drop(parse_group_msg(&v)),
        _ => {
            let now = parse_time("now", "2026-10-08T01:00:00Z").expect("fixed time");
            drop(check_card_update(&v, KEY.id(), &HELD, now, false));
        }
    }
});
