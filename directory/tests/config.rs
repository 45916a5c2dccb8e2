//! Every sample config shipped parses, and bad configs are refused.
#![allow(clippy::unwrap_used)]

use rdv_directory::config::Config;

#[test]
fn sample_config_parses() {
    let text = include_str!("../../docker/directory/config.toml");
    let c = Config::from_toml(text).unwrap();
    assert_eq!(c.listen.port(), 8480);
    assert_eq!(c.limits.evaluate.burst, 2000);
}

#[test]
fn unknown_and_invalid_keys_refused() {
    assert!(Config::from_toml("listne = \"0.0.0.0:1\"").is_err());
    assert!(Config::from_toml("[limits.evaluate]\nburst = 1\nper_day = 1\nextra = 2").is_err());
    assert!(Config::from_toml("bucket_hex_len = 9").is_err());
    assert!(
        Config::from_toml("max_batch = 1000\n[limits.evaluate]\nburst = 10\nper_day = 10").is_err()
    );
}
