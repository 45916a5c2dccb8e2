//! Layered configuration, the same in every service: the defaults, then a
//! TOML file, then `PREFIX_*` environment variables (nested keys joined
//! with `__`, e.g. `RDV_GATEWAY_LIMITS__PER_SENDER__MAX=5`). Unknown keys
//! are refused by the services' `deny_unknown_fields` structs, so a typo
//! is an error at start, not a silently ignored setting.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a configuration was refused: the file, the key and what is wrong
/// with it, in figment's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Loads `T` from `defaults`, the file (which must exist when named) and
/// the environment. `<env_prefix>CONFIG` names the file itself (the
/// binaries' `--config` fallback, which the Docker images set), so it is
/// never read as a key.
pub fn load<T: Serialize + DeserializeOwned>(
    defaults: &T,
    file: Option<&Path>,
    env_prefix: &str,
) -> Result<T, ConfigError> {
    let mut f = Figment::from(Serialized::defaults(defaults));
    if let Some(p) = file {
        if !p.exists() {
            return Err(ConfigError(format!("{} does not exist", p.display())));
        }
        f = f.merge(Toml::file(p));
    }
    f.merge(Env::prefixed(env_prefix).ignore(&["CONFIG"]).split("__"))
        .extract()
        .map_err(|e| ConfigError(e.to_string()))
}

/// Parses TOML text over `defaults` alone (sample configs, tests).
pub fn from_toml<T: Serialize + DeserializeOwned>(
    defaults: &T,
    text: &str,
) -> Result<T, ConfigError> {
    Figment::from(Serialized::defaults(defaults))
        .merge(Toml::string(text))
        .extract()
        .map_err(|e| ConfigError(e.to_string()))
}

#[cfg(test)]
// figment::Jail fixes the closure's error type; it is large by design.
#[allow(clippy::result_large_err)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Sample {
        name: String,
        port: u16,
        limits: Limits,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Limits {
        max: u32,
    }

    impl Default for Sample {
        fn default() -> Self {
            Self {
                name: "x".into(),
                port: 1,
                limits: Limits::default(),
            }
        }
    }

    impl Default for Limits {
        fn default() -> Self {
            Self { max: 10 }
        }
    }

    #[test]
    fn file_then_env_over_defaults_and_config_is_not_a_key() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", "name = \"from-file\"\nport = 2\n")?;
            jail.set_env("RDVKIT_TEST_PORT", "3");
            jail.set_env("RDVKIT_TEST_LIMITS__MAX", "7");
            // Names the file; a key lookup would refuse it as unknown.
            jail.set_env("RDVKIT_TEST_CONFIG", "c.toml");
            let s: Sample = load(
                &Sample::default(),
                Some(Path::new("c.toml")),
                "RDVKIT_TEST_",
            )
            .map_err(|e| e.to_string())?;
            assert_eq!(s.name, "from-file");
            assert_eq!(s.port, 3);
            assert_eq!(s.limits.max, 7);
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_and_missing_files_are_refused() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("RDVKIT_TEST2_PROT", "3");
            let e = load(&Sample::default(), None, "RDVKIT_TEST2_").unwrap_err();
            assert!(e.to_string().contains("prot"), "{e}");
            let e = load(&Sample::default(), Some(Path::new("nope.toml")), "X_").unwrap_err();
            assert!(e.to_string().contains("nope.toml does not exist"), "{e}");
            Ok(())
        });
        let e = from_toml(&Sample::default(), "[limits]\nmax = 1\nmin = 2\n").unwrap_err();
        assert!(e.to_string().contains("min"), "{e}");
        let s: Sample = from_toml(&Sample::default(), "[limits]\nmax = 4\n").unwrap();
        assert_eq!((s.name.as_str(), s.limits.max), ("x", 4));
    }
}
