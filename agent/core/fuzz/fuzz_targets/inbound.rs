//! The agent's inbound path (agent/core/src/inbound.rs): raw Nostr events
//! and envelopes, and inputs spliced into real signed templates so they get
//! past the signatures, fed to Alice's agent in a world of seven agents.
//! Asserts: no panic, no `Err` for carrier input, a refused input changes no
//! state, and nothing changes in memory without a write. Input format and
//! rules: ../src/lib.rs.
//!
//! With `RDV_FUZZ_SEED_DIR=dir`, the init also writes the corpus seeds
//! (real events, and every mode over every template) into `dir` before
//! libFuzzer reads it (scripts/fuzz does this).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        let _ = rdv_agent_core_fuzz::world();
        if let Some(dir) = std::env::var_os("RDV_FUZZ_SEED_DIR") {
            let n = rdv_agent_core_fuzz::write_seeds(std::path::Path::new(&dir))
                .expect("writing the seeds");
            eprintln!("inbound: wrote {n} seeds into {}", dir.to_string_lossy());
        }
    },
    |data: &[u8]| rdv_agent_core_fuzz::run(data)
);
