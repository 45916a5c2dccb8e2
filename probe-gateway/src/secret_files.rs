//! The secret files (docs/probe-gateway.md "Service"): the cookie master
//! secret and the address key, hex in a file, created with mode 0600 when
//! absent. Errors name the file, never its content.

use std::path::Path;

use crate::address_key::AddressKey;
use crate::clock::Entropy;
use crate::config::Config;
use crate::cookie::MasterSecret;
use crate::error::Error;

/// Reads a hex master secret file; creates one (mode 0600) when `create`
/// and the file is absent. The secret is never printed or logged.
pub fn load_secret(
    path: &Path,
    create: bool,
    entropy: &dyn Entropy,
) -> Result<MasterSecret, Error> {
    MasterSecret::from_hex(&read_hex_file(path, create, entropy, "master secret")?)
}

/// Reads the address key file (`address_key_file`), creating it (mode
/// 0600) on first start, exactly like the master secret. Never rotated.
pub fn load_address_key(cfg: &Config, entropy: &dyn Entropy) -> Result<AddressKey, Error> {
    let path = cfg.address_key_path();
    AddressKey::from_hex(&read_hex_file(&path, true, entropy, "address key")?)
        .map_err(|e| Error::Config(format!("address_key_file {}: {e}", path.display())))
}

/// A secret file's text; with `create`, an absent file is first written
/// with 32 random bytes as hex (mode 0600). Errors name the file only.
fn read_hex_file(
    path: &Path,
    create: bool,
    entropy: &dyn Entropy,
    what: &str,
) -> Result<String, Error> {
    if !path.exists() && create {
        use std::io::Write;
        let mut b = [0u8; 32];
        entropy.fill(&mut b);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        writeln!(opts.open(path)?, "{}", hex::encode(b))?;
        tracing::info!(path = %path.display(), "created the {what} file");
    }
    std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("{what} {}: {e}", path.display())))
}
